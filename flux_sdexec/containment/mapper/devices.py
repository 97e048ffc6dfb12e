"""GPU device nodes from sysfs, /proc and /dev, as flux-core's HwlocMapper finds them.

The roots are parameters so tests run this code over a temporary tree; the
entries it returns always name the real ``/dev`` path. For one GPU, in order:
its DRM nodes (``<sysfs>/bus/pci/devices/<addr>/drm/*`` that exist in /dev/dri),
then by driver: NVIDIA ``/dev/nvidia<minor>`` (minor from /proc, required) and
the shared control/UVM nodes present; AMD ``/dev/kfd`` (required, with at least
one DRM node); any other driver only its DRM nodes. ``confirm`` says whether a GPU
driver holds a PCI device (for a GPU whose address hwloc does not give).
"""

import errno
from pathlib import Path

NVIDIA_DRIVER = "nvidia"
AMD_DRIVER = "amdgpu"
NVIDIA_SHARED = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")
# PCI vendor ids of the GPU drivers whose device nodes this module knows
GPU_VENDORS = {0x10DE: "NVIDIA", 0x1002: "AMD"}


class GpuDevices:
    """Finds the device nodes of GPUs by PCI address.

    Args:
        sysfs: root of sysfs (``/sys``).
        dev: root of the device tree (``/dev``).
        proc: root of procfs (``/proc``).
    """

    def __init__(self, sysfs="/sys", dev="/dev", proc="/proc"):
        self.sysfs = Path(sysfs)
        self.dev = Path(dev)
        self.proc = Path(proc)

    def _node(self, name):
        """(exists under the dev root, entry naming the real /dev path)."""
        return (self.dev / name).exists(), f"/dev/{name} rw"

    def driver(self, addr):
        """Lower-case driver name of a PCI device, or None."""
        link = self.sysfs / "bus/pci/devices" / addr / "driver"
        try:
            return link.resolve(strict=True).name.lower()
        except OSError:
            return None

    def drm(self, addr):
        """DRM nodes of the device that exist in /dev/dri, sorted."""
        found = []
        try:
            names = sorted(
                p.name for p in (self.sysfs / "bus/pci/devices" / addr / "drm").iterdir()
            )
        except OSError:
            return found
        for name in names:
            exists, entry = self._node(f"dri/{name}")
            if exists:
                found.append(entry)
        return found

    def nvidia_minor(self, addr):
        """The Device Minor of an NVIDIA GPU, from /proc/driver/nvidia/gpus/<addr>/information."""
        info = self.proc / "driver/nvidia/gpus" / addr / "information"
        try:
            lines = info.read_text().splitlines()
        except OSError:
            lines = []
        for line in lines:
            key, _, value = line.partition(":")
            if key.strip() == "Device Minor" and value.strip().isdigit():
                return int(value)
        raise OSError(errno.ENODEV, f"GPU {addr}: Device Minor not found in {info}")

    def nvidia(self, addr):
        """``/dev/nvidia<minor>`` (required) and the shared NVIDIA nodes present."""
        exists, entry = self._node(f"nvidia{self.nvidia_minor(addr)}")
        if not exists:
            raise OSError(errno.ENODEV, f"GPU {addr}: {entry.split()[0]} not found")
        found = [entry]
        for name in NVIDIA_SHARED:
            exists, entry = self._node(name)
            if exists:
                found.append(entry)
        return found

    def confirm(self, addr, vendor_id):
        """(whether the GPU driver of ``vendor_id`` holds the PCI device at ``addr``, the
        evidence looked for, naming the real path)."""
        if vendor_id == 0x10DE:
            listed = self.proc / "driver/nvidia/gpus" / addr
            return listed.is_dir(), f"/proc/driver/nvidia/gpus/{addr}"
        if vendor_id == 0x1002:
            return AMD_DRIVER in (self.driver(addr) or ""), f"driver {AMD_DRIVER} of {addr}"
        return False, f"a GPU driver of {addr}"

    def gpu(self, addr):
        """Every DeviceAllow entry (``"<path> rw"``) of the GPU at PCI address ``addr``.

        Raises:
            OSError: ENODEV when a node the driver needs is missing.
        """
        found = self.drm(addr)
        driver = self.driver(addr) or ""
        if NVIDIA_DRIVER in driver:
            found += self.nvidia(addr)
        elif AMD_DRIVER in driver:
            if not found:
                raise OSError(errno.ENODEV, f"GPU {addr}: no /dev/dri devices found")
            exists, entry = self._node("kfd")
            if not exists:
                raise OSError(errno.ENODEV, f"GPU {addr}: /dev/kfd not found")
            found.append(entry)
        return found
