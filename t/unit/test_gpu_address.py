"""A GPU's PCI address when hwloc hangs its osdev off no PCI device: the real H200 topology,
then variants of it where more than one device could be meant (never a guess)."""

import errno
import shutil

import pytest
from conftest import H200, h200_xml, osdev, pci

from flux_sdexec.containment.mapper import HwlocMapper
from flux_sdexec.containment.mapper.devices import GpuDevices
from flux_sdexec.containment.mapper.gpu_address import GpuAddress, locate
from flux_sdexec.containment.mapper.topology import HwlocGpu, PciDevice, Topology

H200_GPU = PciDevice("0000:00:06.0", 0x0302, 0x10DE)
BRIDGE = "bridge 0000:[00-00]"
CONFIRMED = f"the one candidate under {BRIDGE}, confirmed by /proc/driver/nvidia/gpus/0000:00:06.0"
FIX = "hwloc with the CUDA or NVML backend"


def node_roots(node):
    return {"sysfs": str(node / "sys"), "dev": str(node / "dev"), "proc": str(node / "proc")}


@pytest.fixture
def node(tmp_path):
    """A copy of the H200 node's files, to change."""
    shutil.copytree(H200 / "node", tmp_path / "node", symlinks=True)
    return tmp_path / "node"


def addresses(xml, node=H200 / "node"):
    """``{osdev name: GpuAddress or the OSError's text}`` of every GPU of ``xml``."""
    devices = GpuDevices(**node_roots(node))
    out = {}
    for i, gpu in enumerate(Topology(xml).gpus()):
        try:
            out[gpu.name] = locate(i, gpu, devices.confirm)
        except OSError as exc:
            assert exc.errno == errno.ENODEV
            out[gpu.name] = exc.strerror
    return out


def R(gpus):
    children = {"core": "0", "gpu": gpus}
    return {"version": 1, "execution": {"R_lite": [{"rank": "0", "children": children}]}}


def test_real_topology_facts():
    """hwloc's facts: opencl0d0 has no PCI parent; under the bridge, one GPU-class device."""
    assert Topology(h200_xml()).gpus() == [
        HwlocGpu("opencl0d0", "OpenCL", None, BRIDGE, (H200_GPU,), ())
    ]


def test_real_topology_one_candidate_confirmed():
    """The one NVIDIA 3D controller under the bridge, listed by the nvidia driver, is it."""
    assert addresses(h200_xml()) == {"opencl0d0": GpuAddress("0000:00:06.0", CONFIRMED)}


def test_two_candidates_fail_closed():
    """Two NVIDIA devices under the bridge: the job fails, naming the GPU, both and the fix."""
    xml = h200_xml(pci("0000:00:07.0"))
    with pytest.raises(OSError) as info:
        HwlocMapper(xml, 0, **node_roots(H200 / "node")).map(R("0"))
    assert info.value.errno == errno.ENODEV
    assert info.value.strerror == (
        "failed to map GPUs: gpu0 (opencl0d0, OpenCL) hangs off no PCI device in the "
        f"topology and 2 PCI devices under {BRIDGE} could be it: 0000:00:06.0, 0000:00:07.0; "
        "no address is guessed (a wrong device in DeviceAllow breaches containment): "
        f"use {FIX} (each GPU then hangs off its PCI device) or a mapper of the site's own "
        "(sdexec.mapper)"
    )


def test_device_claimed_by_another_osdev_of_the_backend():
    """A device already holding an OpenCL osdev is not a candidate for another one."""
    xml = h200_xml(pci("0000:00:07.0", children=osdev("opencl0d1")))
    assert addresses(xml) == {
        "opencl0d1": GpuAddress("0000:00:07.0", "parent"),
        "opencl0d0": GpuAddress("0000:00:06.0", CONFIRMED),
    }


def test_other_backend_on_the_device_does_not_claim_it():
    """A CUDA osdev under the device (flux-core counts both) leaves it the OpenCL one's."""
    cuda = f'pci_link_speed="63.015385">{osdev("cuda0", "CUDA")}</object>'
    xml = h200_xml().replace('pci_link_speed="63.015385"/>', cuda)
    assert addresses(xml) == {
        "cuda0": GpuAddress("0000:00:06.0", "parent"),
        "opencl0d0": GpuAddress("0000:00:06.0", CONFIRMED),
    }


def test_devices_of_no_gpu_driver_vendor_are_not_candidates():
    """An Intel display controller and a NIC beside it change nothing."""
    intel = pci("0000:00:08.0", "0300 [8086:56c0] [8086:4905] 08")
    xml = h200_xml(intel + pci("0000:00:09.0", "0200 [8086:1572] [8086:0000] 01"))
    assert addresses(xml) == {"opencl0d0": GpuAddress("0000:00:06.0", CONFIRMED)}


def test_candidate_the_driver_does_not_list(node):
    """The one candidate, not listed by the nvidia driver, is refused."""
    shutil.rmtree(node / "proc/driver/nvidia/gpus/0000:00:06.0")
    assert addresses(h200_xml(), node)["opencl0d0"] == (
        f"gpu0 (opencl0d0, OpenCL) hangs off no PCI device in the topology and the one "
        f"candidate under {BRIDGE}, 0000:00:06.0, is not confirmed by its driver (no "
        "/proc/driver/nvidia/gpus/0000:00:06.0); no address is guessed (a wrong device in "
        f"DeviceAllow breaches containment): use {FIX} (each GPU then hangs off its PCI device) "
        "or a mapper of the site's own (sdexec.mapper)"
    )


def test_two_osdevs_without_parent_share_the_candidates():
    """Two OpenCL osdevs off the bridge and one device: neither is known to be it."""
    found = addresses(h200_xml(osdev("opencl0d1")))
    assert set(found) == {"opencl0d0", "opencl0d1"}
    assert f"opencl0d1 also hangs off {BRIDGE} without a PCI device" in found["opencl0d0"]
    assert "0000:00:06.0" in found["opencl0d0"]


def test_no_candidate():
    """Without the GPU's PCI device in the topology there is nothing to give."""
    xml = h200_xml().replace('pci_type="0302 [10de', 'pci_type="0200 [10de')
    assert f"no GPU of NVIDIA or AMD under {BRIDGE} is free to be it" in addresses(xml)["opencl0d0"]


def test_amd_candidate_confirmed_by_the_amdgpu_driver(node):
    """An AMD device is confirmed by its amdgpu driver link, not by NVIDIA's /proc."""
    xml = h200_xml().replace("[10de:2335]", "[1002:74a1]")
    assert "not confirmed by its driver (no driver amdgpu of 0000:00:06.0)" in (
        addresses(xml, node)["opencl0d0"]
    )
    link = node / "sys/bus/pci/devices/0000:00:06.0/driver"
    link.unlink()
    (node / "sys/bus/pci/drivers/amdgpu").mkdir()
    link.symlink_to("../../drivers/amdgpu")
    assert addresses(xml, node) == {
        "opencl0d0": GpuAddress(
            "0000:00:06.0",
            f"the one candidate under {BRIDGE}, confirmed by driver amdgpu of 0000:00:06.0",
        )
    }
