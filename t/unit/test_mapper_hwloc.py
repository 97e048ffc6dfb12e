"""HwlocMapper over synthetic.xml and a temporary node tree: cores, GPUs, memory caps."""

import errno
import json

import pytest
from conftest import xml

from flux_sdexec.containment.mapper import HwlocMapper, ResourceMapper

NVIDIA = "/dev/dri/card0 rw,/dev/dri/renderD128 rw,/dev/nvidia0 rw,/dev/nvidiactl rw"


def R(cores="0", gpus=None, rank="0"):
    children = {"core": cores}
    if gpus is not None:
        children["gpu"] = gpus
    return {"version": 1, "execution": {"R_lite": [{"rank": rank, "children": children}]}}


@pytest.fixture
def mapper(node):
    return HwlocMapper(xml("synthetic"), 0, **node.roots())


def test_cores(mapper):
    """Cores map to their PUs' OS indexes and NUMA nodes, DevicePolicy=closed added."""
    assert mapper.map(R("0-1,4")) == {
        "AllowedCPUs": "0-1,4,16-17,20",
        "AllowedMemoryNodes": "0-1",
        "DevicePolicy": "closed",
    }


def test_R_as_json_text_and_other_ranks(node):
    """R as JSON text works; only this rank's entry counts; a rank not in R gets {}."""
    text = json.dumps(
        {
            "version": 1,
            "execution": {
                "R_lite": [
                    {"rank": "0", "children": {"core": "0"}},
                    {"rank": "1-2", "children": {"core": "8"}},
                ]
            },
        }
    )
    assert HwlocMapper(xml("synthetic"), 2, **node.roots()).map(text)["AllowedCPUs"] == "8,24"
    assert HwlocMapper(xml("synthetic"), 3, **node.roots()).map(text) == {}


def test_nvidia_gpu(mapper):
    """NVIDIA: DRM nodes, /dev/nvidia<minor>, then the control and UVM nodes present."""
    props = mapper.map(R("0", "0"))
    assert props["DeviceAllow"] == NVIDIA + ",/dev/nvidia-uvm rw"


def test_amd_gpus_share_kfd(mapper):
    """AMD: DRM nodes plus /dev/kfd, listed once for several GPUs (partitions too)."""
    assert mapper.map(R("0", "1-3"))["DeviceAllow"] == (
        "/dev/dri/card1 rw,/dev/dri/renderD129 rw,/dev/kfd rw,"
        "/dev/dri/card2 rw,/dev/dri/renderD130 rw"
    )


def test_other_driver_drm_only(mapper):
    """Any other driver: its DRM nodes only."""
    assert mapper.map(R("0", "4"))["DeviceAllow"] == "/dev/dri/card3 rw,/dev/dri/renderD131 rw"


def test_no_gpus_no_device_allow(mapper):
    """An empty gpu set gives no DeviceAllow."""
    assert "DeviceAllow" not in mapper.map(R("0", ""))


@pytest.mark.parametrize(
    "remove, gpu, text",
    [
        ("proc/driver/nvidia/gpus/0000:01:00.0/information", "0", "Device Minor not found"),
        ("dev/nvidia0", "0", "/dev/nvidia0 not found"),
        ("dev/kfd", "1", "/dev/kfd not found"),
        ("dev/dri/card2", "3", None),
    ],
)
def test_missing_device_nodes(node, remove, gpu, text):
    """A node a driver needs is ENODEV naming the GPU; a missing DRM node is just left out."""
    node.remove(node.sysfs.parent / remove)
    mapper = HwlocMapper(xml("synthetic"), 0, **node.roots())
    if text is None:
        assert "card2" not in mapper.map(R("0", gpu))["DeviceAllow"]
        return
    with pytest.raises(OSError) as info:
        mapper.map(R("0", gpu))
    assert info.value.errno == errno.ENODEV and text in info.value.strerror


def test_amd_without_drm(node):
    """An AMD GPU without any DRM node is ENODEV."""
    for name in ("card2", "renderD130"):
        node.remove(node.dev / "dri" / name)
    with pytest.raises(OSError) as info:
        HwlocMapper(xml("synthetic"), 0, **node.roots()).map(R("0", "3"))
    assert (info.value.errno, info.value.strerror) == (
        errno.ENODEV,
        "GPU 0000:c1:00.0: no /dev/dri devices found",
    )


@pytest.mark.parametrize(
    "cores, gpus, text",
    [
        ("16", None, "failed to map cores: core 16 not found in node topology"),
        ("0", "5", "failed to map GPUs: gpu5 not found in local topology (gpu count=5)"),
    ],
)
def test_unknown_ids(mapper, cores, gpus, text):
    """Unknown core and GPU ids are ENOENT naming the id."""
    with pytest.raises(OSError) as info:
        mapper.map(R(cores, gpus))
    assert (info.value.errno, info.value.strerror) == (errno.ENOENT, text)


def test_no_gpus_on_this_machine_fixture(node):
    """A node without GPUs reports gpu count 0."""
    with pytest.raises(OSError, match=r"gpu0 not found in local topology \(gpu count=0\)"):
        HwlocMapper(xml("this-machine"), 0, **node.roots()).map(R("0", "0"))


@pytest.mark.parametrize(
    "cores, extra, expected",
    [
        # percentages of the node's 16 GiB (4194304 pages) in whole pages, 32 PUs
        ("0-7", {"MemoryMax": "95%"}, {"MemoryMax": str(1992294 * 4096)}),  # 47.5%
        ("0-2", {"MemoryMax": "93%"}, {"MemoryMax": str(731381 * 4096)}),  # 17.4375%
        ("0-15", {"MemoryMax": "95%"}, {"MemoryMax": str(3984588 * 4096)}),
        ("0", {"MemoryMax": "50%"}, {"MemoryMax": str(512 << 20)}),  # 3.125%: 512 MiB
        ("0", {"MemoryMax": "5%"}, {"MemoryMax": str(13107 * 4096)}),  # 0.3125%, was "0%"
        ("0-7", {"MemoryHigh": "8G"}, {"MemoryHigh": str(4 * 1024**3)}),
        ("0", {"MemorySwapMax": "1m"}, {"MemorySwapMax": str(1024**2 // 16)}),
        ("0-3", {"MemoryMax": "4096"}, {"MemoryMax": "1024"}),
        ("0-7", {"MemoryMax": "1.5K"}, {"MemoryMax": "768"}),
        ("0-7", {"MemoryMax": "infinity", "MemoryHigh": "lots"}, {}),
        ("0-7", {"MemoryMin": "1G", "MemoryLow": "50%"}, {}),
    ],
)
def test_memory_caps_scaled(mapper, cores, extra, expected):
    """Caps scale by allocated/total PUs; infinity, junk and protections are left out."""
    props = mapper.map(R(cores), extra_properties=extra)
    assert {k: v for k, v in props.items() if k.startswith("Memory")} == expected


def test_no_scaling_without_cpus(node):
    """No AllowedCPUs (a subclass that maps nothing for cores): nothing is scaled."""

    class GpusOnly(HwlocMapper):
        def map_cores(self, cores):
            return {}

    m = GpusOnly(xml("synthetic"), 0, **node.roots())
    assert m.map(R("0", "4"), extra_properties={"MemoryMax": "50%"}) == {
        "DeviceAllow": "/dev/dri/card3 rw,/dev/dri/renderD131 rw",
        "DevicePolicy": "closed",
    }


def test_subclass_hooks(node):
    """map_<type> and finalize_properties can be overridden as with flux-core's class."""

    class Site(HwlocMapper):
        def finalize_properties(self, properties, R, extra_properties=None):
            properties = super().finalize_properties(properties, R, extra_properties)
            properties["CPUAccounting"] = "true"
            del properties["AllowedMemoryNodes"]
            return properties

    assert Site(xml("synthetic"), 0, **node.roots()).map(R("1")) == {
        "AllowedCPUs": "1,17",
        "DevicePolicy": "closed",
        "CPUAccounting": "true",
    }


def test_base_class_skips_unknown_types():
    """ResourceMapper without map_* methods maps nothing and stays unconstrained."""
    assert ResourceMapper(0).map(R("0-3", "0")) == {}


@pytest.mark.parametrize("bad", ["{}", {"version": 2}, {"version": 1, "execution": {}}])
def test_bad_R(mapper, bad):
    """R that is not RFC 20 version 1 is a ValueError."""
    with pytest.raises(ValueError):
        mapper.map(bad)
