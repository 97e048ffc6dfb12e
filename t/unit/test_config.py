"""The config sdexec reads (config.py), parsed once into one Config."""

import errno

import pytest

from flux_sdexec.config import Config, Settings
from flux_sdexec.core.errors import RequestError


def test_an_empty_config_is_every_default():
    assert Config.parse({}) == Config()


def test_every_key_is_read_into_its_field():
    conf = {
        "systemd": {"sdexec-debug": True, "sdexec-unload": "stop-all"},
        "sdexec": {
            "containment-check": "warn",
            "containment-required": ["MemoryMax", "MemoryMax"],
            "systemd-timeout": "2m",
            "orphan-check-interval": "10s",
            "restart-grace": "1h",
            "usage": "all",
        },
    }
    assert Config.parse(conf) == Config(
        debug=True,
        unload_policy="stop-all",
        containment_check="warn",
        containment_required=("MemoryMax",),
        systemd_timeout=120.0,
        orphan_interval=10.0,
        restart_grace=3600.0,
        usage="all",
    )


def test_a_wrong_key_refuses_the_whole_config():
    with pytest.raises(RequestError) as info:
        Config.parse({"sdexec": {"usage": "some"}})
    assert info.value.errno == errno.EINVAL and "sdexec.usage" in info.value.strerror


def test_settings_take_what_config_reload_changes_in_place():
    settings = Settings()
    settings.take(Config(debug=True, unload_policy="stop-all", restart_grace=5.0, usage="none"))
    assert settings == Settings(True, "stop-all", 5.0, "none")
