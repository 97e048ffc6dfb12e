"""Fixtures for the mapper tests (hwloc XML files and a temporary node tree) and the
containment tests (a fake cgroup tree of each layout, from t/unit/cgroup_trees.py).

``node`` builds sysfs, /dev and /proc for the GPUs of t/fixtures/hwloc/synthetic.xml
(see add-gpus.py there): NVIDIA 0000:01:00.0 (minor 0), AMD 0000:41:00.0 (two
partitions) and 0000:c1:00.0, Intel 0000:e1:00.0. Device nodes are plain files:
GPU discovery only asks whether they exist, as flux-core's does.
"""

import os
from pathlib import Path

import pytest

from cgroup_trees import Tree
from flux_sdexec.containment import cgroups

HWLOC = Path(__file__).resolve().parents[1] / "fixtures" / "hwloc"
H200 = Path(__file__).resolve().parents[1] / "fixtures" / "gpu-node-h200"
GPUS = {
    "0000:01:00.0": ("nvidia", ["card0", "renderD128"]),
    "0000:41:00.0": ("amdgpu", ["card1", "renderD129"]),
    "0000:c1:00.0": ("amdgpu", ["card2", "renderD130"]),
    "0000:e1:00.0": ("i915", ["card3", "renderD131"]),
}


def xml(name):
    """The text of t/fixtures/hwloc/<name>.xml."""
    return (HWLOC / f"{name}.xml").read_text()


def h200_xml(beside_gpu=""):
    """The H200 node's topology, with ``beside_gpu`` (XML objects) put under the host
    bridge right after the GPU's PCI device."""
    text = (H200 / "topo-opencl.xml").read_text()
    gpu = text.index("\n", text.index('pci_busid="0000:00:06.0"')) + 1
    return text[:gpu] + beside_gpu + text[gpu:]


def pci(address, ids="0302 [10de:2335] [10de:18bf] a1", children=""):
    """An hwloc XML PCI device (an NVIDIA H200 unless ``ids`` says otherwise)."""
    head = f'<object type="PCIDev" pci_busid="{address}" pci_type="{ids}"'
    return f"{head}>{children}</object>\n" if children else f"{head}/>\n"


def osdev(name, backend="OpenCL"):
    """An hwloc XML GPU OS device of ``backend``."""
    return (
        f'<object type="OSDev" name="{name}" subtype="{backend}" osdev_type="5">'
        f'<info name="Backend" value="{backend}"/></object>\n'
    )


class Node:
    """A temporary node tree; ``remove(path)`` deletes one piece of it."""

    def __init__(self, root):
        self.sysfs, self.dev, self.proc = root / "sys", root / "dev", root / "proc"
        for addr, (driver, drm) in GPUS.items():
            pci = self.sysfs / "bus/pci/devices" / addr
            (pci / "drm").mkdir(parents=True)
            drivers = self.sysfs / "bus/pci/drivers" / driver
            drivers.mkdir(parents=True, exist_ok=True)
            os.symlink(drivers, pci / "driver")
            for name in drm:
                (pci / "drm" / name).mkdir()
                self.touch(f"dri/{name}")
        info = self.proc / "driver/nvidia/gpus/0000:01:00.0/information"
        info.parent.mkdir(parents=True)
        info.write_text("Model: A100\nIRQ: 42\nDevice Minor: 0\nBus Location: 0000:01:00.0\n")
        (self.proc / "meminfo").write_text(f"MemTotal: {16 << 20} kB\nMemFree: 1 kB\n")
        for name in ("nvidia0", "nvidiactl", "nvidia-uvm", "kfd"):
            self.touch(name)

    def touch(self, name):
        path = self.dev / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()

    def remove(self, path):
        Path(path).unlink()

    def roots(self):
        return {"sysfs": str(self.sysfs), "dev": str(self.dev), "proc": str(self.proc)}


@pytest.fixture
def node(tmp_path):
    """A node tree matching synthetic.xml's GPUs."""
    return Node(tmp_path)


@pytest.fixture
def unified(tmp_path):
    return Tree(tmp_path, cgroups.UNIFIED, v2_controllers="cpuset cpu memory pids")


@pytest.fixture
def hybrid(tmp_path):
    return Tree(tmp_path, cgroups.HYBRID)


@pytest.fixture
def legacy(tmp_path):
    return Tree(tmp_path, cgroups.LEGACY)
