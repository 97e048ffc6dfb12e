"""SDEXEC_PROP_<Name> typing and the full StartTransientUnit property list."""

import errno

import pytest

from flux_sdexec.core.errors import RequestError
from flux_sdexec.core.properties import start_properties, unit_properties
from flux_sdexec.core.values import UINT64_MAX, idset_bitmask, parse_size


def props(**opts):
    return unit_properties({f"SDEXEC_PROP_{k}": v for k, v in opts.items()})


@pytest.mark.parametrize(
    "text, value",
    [
        ("0", 0),
        ("512", 512),
        ("1k", 1024),
        ("1G", 1 << 30),
        ("1.5M", 3 << 19),
        ("0x10", 16),
        ("010", 8),
        ("2E", 2 << 60),
    ],
)
def test_parse_size(text, value):
    """Decimal, hex, octal and fractional sizes with 1024-based suffixes."""
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "-1", "1Q", "G", "1..2", "inf", "99999E"])
def test_parse_size_rejects(text):
    """Signs, unknown suffixes, overflow and non-numbers are refused."""
    with pytest.raises(ValueError):
        parse_size(text)


def test_memory_properties():
    """Sizes as bytes, infinity as UINT64_MAX, N% as <Name>Scale of 2^32-1."""
    assert props(MemoryHigh="1G", MemoryMax="infinity", MemoryLow="100%", MemoryMin="50%") == [
        ("MemoryHigh", "t", 1 << 30),
        ("MemoryMax", "t", UINT64_MAX),
        ("MemoryLowScale", "u", 4294967295),
        ("MemoryMinScale", "u", 2147483647),
    ]


def test_idset_bitmask_matches_systemd_layout():
    """Byte i holds ids 8i..8i+7, LSB first; empty set is an empty array."""
    assert idset_bitmask("0,57-99,127") == bytes.fromhex("01000000000000feffffffff0f000080")
    assert idset_bitmask("") == b""
    assert idset_bitmask("[3]") == b"\x08"


def test_typed_properties():
    """Each typed property gets its D-Bus signature."""
    assert props(
        DeviceAllow="/dev/null rw, /dev/zero r",
        SendSIGKILL="No",
        TimeoutStopUSec="42",
        OOMScoreAdjust="-100",
        CPUQuota="50%",
        TasksMax="10%",
        KillMode="process",
        Description="hi there",
    ) == [
        ("DeviceAllow", "a(ss)", [("/dev/null", "rw"), ("/dev/zero", "r")]),
        ("SendSIGKILL", "b", False),
        ("TimeoutStopUSec", "t", 42),
        ("OOMScoreAdjust", "i", -100),
        ("CPUQuotaPerSecUSec", "t", 500000),
        ("TasksMaxScale", "u", 429496729),
        ("KillMode", "s", "process"),
        ("Description", "s", "hi there"),
    ]


@pytest.mark.parametrize(
    "name, value",
    [
        ("SendSIGKILL", "zzz"),
        ("TimeoutStopUSec", "30s"),
        ("MemoryHigh", "zzz"),
        ("MemoryMax", "101%"),
        ("AllowedCPUs", "x"),
        ("AllowedCPUs", "5-1"),
        ("DeviceAllow", ""),
        ("DeviceAllow", "/dev/null"),
        ("KillMode", "zzz"),
        ("DevicePolicy", "open"),
        ("CPUQuota", "0%"),
        ("OOMScoreAdjust", "1.5"),
        ("Bad-Name", "x"),
    ],
)
def test_bad_values_name_the_option(name, value):
    """A value that does not convert is EINVAL naming SDEXEC_PROP_<Name>."""
    with pytest.raises(RequestError) as info:
        props(**{name: value})
    assert info.value.errno == errno.EINVAL
    assert str(info.value).startswith(f"SDEXEC_PROP_{name}: error setting property")


def test_bare_prefix_and_other_options_ignored():
    """A bare SDEXEC_PROP_ and non-property options add nothing."""
    assert unit_properties({"SDEXEC_PROP_": "x", "SDEXEC_NAME": "a.service"}) == []


def test_start_properties_order_and_defaults():
    """ExecStart, cwd, RemainAfterExit, Environment, fds, user props, Type, IgnoreSIGPIPE."""
    got = start_properties(
        ["/bin/echo", "hi"],
        "/tmp",
        ["A=1"],
        {"stdin": 5, "stdout": 6},
        {"SDEXEC_PROP_Description": "d"},
    )
    assert got == [
        ("ExecStart", "a(sasb)", [("/bin/echo", ["/bin/echo", "hi"], False)]),
        ("WorkingDirectory", "s", "/tmp"),
        ("RemainAfterExit", "b", True),
        ("Environment", "as", ["A=1"]),
        ("StandardInputFileDescriptor", "h", 5),
        ("StandardOutputFileDescriptor", "h", 6),
        ("Description", "s", "d"),
        ("Type", "s", "exec"),
        ("IgnoreSIGPIPE", "b", True),
    ]


def test_start_properties_user_type_replaces_default():
    """SDEXEC_PROP_Type is sent instead of the default Type=exec."""
    got = start_properties(["x"], None, [], {}, {"SDEXEC_PROP_Type": "simple"})
    assert [p for p in got if p[0] == "Type"] == [("Type", "s", "simple")]
