"""The real H200 node of t/fixtures/gpu-node-h200: its hwloc topology and its files, mapped.

Its OpenCL osdev hangs off the host bridge, not off its PCI device 0000:00:06.0; the one
NVIDIA 3D controller under that bridge, which the nvidia driver lists, is the GPU.
"""

import json
import os
import shutil
import stat

import pytest
from conftest import H200

from flux_sdexec.containment.mapper import HwlocMapper, allowed
from flux_sdexec.containment.mapper import command as cli

XML = H200 / "topo-opencl.xml"
NVIDIA = "/dev/nvidia0 rw,/dev/nvidiactl rw,/dev/nvidia-uvm rw,/dev/nvidia-uvm-tools rw"
CORES_0_3_GPU_0 = {
    "AllowedCPUs": "0-3",
    "AllowedMemoryNodes": "0",
    "DevicePolicy": "closed",
    "DeviceAllow": NVIDIA,
}


def roots(node=H200 / "node"):
    return {"sysfs": str(node / "sys"), "dev": str(node / "dev"), "proc": str(node / "proc")}


def R(cores, gpus=None):
    children = {"core": cores}
    if gpus is not None:
        children["gpu"] = gpus
    return {"version": 1, "execution": {"R_lite": [{"rank": "0", "children": children}]}}


def test_cores_0_3_and_gpu_0():
    """Cores 0-3 and GPU 0 give AllowedCPUs=0-3 and exactly the node's four NVIDIA nodes."""
    assert HwlocMapper(XML.read_text(), 0, **roots()).map(R("0-3", "0")) == CORES_0_3_GPU_0


def test_cli_with_the_node_as_root(capsys):
    """``--root`` reads the node's files: the CLI prints what the module would map."""
    args = ["--cores", "0-3", "--gpus", "0", "--xml", str(XML), "--root", str(H200 / "node")]
    assert cli.main(args) == 0
    assert json.loads(capsys.readouterr().out) == CORES_0_3_GPU_0


def test_without_a_gpu_backend_there_is_no_gpu():
    """hwloc without its OpenCL plugin (Debian has no CUDA or NVML one) shows no GPU."""
    mapper = HwlocMapper((H200 / "topo-no-gpu-backend.xml").read_text(), 0, **roots())
    with pytest.raises(OSError, match=r"gpu0 not found in local topology \(gpu count=0\)"):
        mapper.map(R("0", "0"))


def test_mig_capabilities_through_allowed_devices(tmp_path):
    """``/dev/nvidia-caps/*`` expands to the node's two MIG capability nodes."""
    node = tmp_path / "node"
    shutil.copytree(H200 / "node", node, symlinks=True)
    for name in ("nvidia-cap1", "nvidia-cap2"):
        path = node / "dev/nvidia-caps" / name
        path.unlink()
        try:
            os.mknod(path, stat.S_IFCHR | 0o400, os.makedev(241, int(name[-1])))
        except PermissionError:
            pytest.skip("mknod needs root")
    patterns = allowed.parse(["/dev/nvidia-caps/*"])
    assert allowed.expand(patterns, str(node / "dev")) == [
        "/dev/nvidia-caps/nvidia-cap1 rw",
        "/dev/nvidia-caps/nvidia-cap2 rw",
    ]
