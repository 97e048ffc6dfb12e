"""MapperService: lazy start, mapper class and searchpath, stats, reload, allowed devices."""

import errno
import os
import stat
import sys

import pytest
from conftest import xml

from flux_sdexec.containment.mapper.mapper_service import MapperService

R = {"version": 1, "execution": {"R_lite": [{"rank": "0", "children": {"core": "0"}}]}}
CUSTOM = '''
from flux_sdexec.containment.mapper import ResourceMapper


class SiteMapper(ResourceMapper):
    """What a site writes: flux-core's interface, cls(xml, rank)."""

    def __init__(self, xml, rank=0):
        super().__init__(rank)

    def map_cores(self, cores):
        return {"MemoryHigh": "1G"}
'''


class Fetch:
    """resource.topo-get stand-in that counts its calls."""

    def __init__(self, text):
        self.text, self.calls = text, 0

    def __call__(self):
        self.calls += 1
        return self.text


def conf(**sdexec):
    return {"sdexec": {k.replace("_", "-"): v for k, v in sdexec.items()}}


def test_lazy_and_fetched_once():
    """Nothing is fetched at start; the XML is fetched once, even across a reload."""
    fetch = Fetch(xml("synthetic"))
    svc = MapperService(0, {}, fetch)
    assert fetch.calls == 0
    assert svc.lookup(R)["AllowedCPUs"] == "0,16"
    svc.reconfigure({})
    svc.lookup(R)
    assert (fetch.calls, svc.requests) == (1, 2)


def test_default_stats():
    """Stats name the default mapper as flux-core reports it (its t2416 compares
    ``mapper_class`` with ``flux.sdexec.map.HwlocMapper``), the class built, ours, as
    ``mapper_impl``, and count successful lookups only."""
    svc = MapperService(0, {}, Fetch(xml("synthetic")))
    svc.lookup(R)
    with pytest.raises(OSError):
        svc.lookup(
            {"version": 1, "execution": {"R_lite": [{"rank": "0", "children": {"core": "99"}}]}}
        )
    assert svc.stats() == {
        "config": {
            "mapper_class": "flux.sdexec.map.HwlocMapper",
            "mapper_impl": "flux_sdexec.map.HwlocMapper",
            "mapper_searchpath": "",
            "allowed_device_patterns": [],
            "allowed_devices": [],
        },
        "requests": 1,
    }


def test_empty_topology():
    """An empty topo-get payload is ENODATA."""
    with pytest.raises(OSError) as info:
        MapperService(0, {}, Fetch(None)).lookup(R)
    assert (info.value.errno, info.value.strerror) == (
        errno.ENODATA,
        "topo-get returned no payload",
    )


def test_custom_mapper_from_searchpath(tmp_path):
    """A class named in sdexec.mapper is imported from sdexec.mapper-searchpath."""
    (tmp_path / "sitemap.py").write_text(CUSTOM)
    svc = MapperService(
        0, conf(mapper="sitemap.SiteMapper", mapper_searchpath=str(tmp_path)), Fetch("x")
    )
    try:
        assert svc.lookup(R) == {"MemoryHigh": "1G", "DevicePolicy": "closed"}
        assert svc.stats()["config"]["mapper_class"] == "sitemap.SiteMapper"
        assert svc.stats()["config"]["mapper_impl"] == "sitemap.SiteMapper"
        assert svc.stats()["config"]["mapper_searchpath"] == str(tmp_path)
    finally:
        sys.path.remove(str(tmp_path))


def test_reload_back_to_the_default_names_it_as_flux_core_does(tmp_path):
    """After a custom mapper, a config naming none reports flux-core's default name again
    (t2416's 'revert to default mapper'), and ours as the class built."""
    (tmp_path / "sitemap2.py").write_text(CUSTOM)
    svc = MapperService(
        0,
        conf(mapper="sitemap2.SiteMapper", mapper_searchpath=str(tmp_path)),
        Fetch(xml("synthetic")),
    )
    try:
        svc.lookup(R)
        svc.reconfigure({})
        config = svc.stats()["config"]
        assert (config["mapper_class"], config["mapper_impl"]) == (
            "flux.sdexec.map.HwlocMapper",
            "flux_sdexec.map.HwlocMapper",
        )
    finally:
        sys.path.remove(str(tmp_path))


def test_mapper_name_must_be_dotted():
    """A mapper name without a module is refused at lookup, as flux-core does."""
    svc = MapperService(0, conf(mapper="HwlocMapper"), Fetch(xml("synthetic")))
    with pytest.raises(ValueError, match="fully-qualified class name: 'HwlocMapper'"):
        svc.lookup(R)


def test_extra_properties_scaled():
    """exec.sdexec-properties reach the mapper as extra_properties."""
    svc = MapperService(
        0, {"exec": {"sdexec-properties": {"MemoryMax": "64G"}}}, Fetch(xml("synthetic"))
    )
    assert svc.lookup(R)["MemoryMax"] == str(4 * 1024**3)


def test_bad_config_refused_old_kept(tmp_path):
    """A bad allowed-devices value is refused by the reload; the old one stays in force."""
    svc = MapperService(
        0, conf(allowed_devices=["/dev/null"]), Fetch(xml("synthetic")), str(tmp_path)
    )
    with pytest.raises(ValueError, match="not a path under /dev/"):
        svc.reconfigure(conf(allowed_devices=["/etc/passwd"]))
    assert svc.stats()["config"]["allowed_device_patterns"] == ["/dev/null"]
    with pytest.raises(ValueError):
        MapperService(0, conf(mapper=5), Fetch(""))


def test_allowed_devices_each_lookup(tmp_path):
    """Allowed devices are appended when the mapper constrains, re-read at each lookup."""
    try:
        os.mknod(tmp_path / "cxi0", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("mknod needs root")
    svc = MapperService(
        0, conf(allowed_devices=["/dev/cxi*"]), Fetch(xml("synthetic")), str(tmp_path)
    )
    assert svc.lookup(R)["DeviceAllow"] == "/dev/cxi0 rw"
    os.mknod(tmp_path / "cxi1", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    assert svc.lookup(R)["DeviceAllow"] == "/dev/cxi0 rw,/dev/cxi1 rw"
    assert svc.stats()["config"]["allowed_devices"] == ["/dev/cxi0 rw", "/dev/cxi1 rw"]
    other = {"version": 1, "execution": {"R_lite": [{"rank": "1", "children": {"core": "0"}}]}}
    assert svc.lookup(other) == {}
