"""hwloc's plugins load where this project reads a topology itself (``Topology()``).

On Debian and RHEL the PCI, OpenCL, CUDA, NVML and RSMI discovery of hwloc are plugins,
which resolve their symbols in the libhwloc that loaded them. Each case runs in a fresh
interpreter: hwloc loads its plugins once per process.
"""

import glob
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLUGINS = glob.glob("/usr/lib*/hwloc/hwloc_pci.so") + glob.glob("/usr/lib*/*/hwloc/hwloc_pci.so")
# PCI base classes hwloc keeps under the "important" I/O filter the mapper loads with:
# storage, network, display, processing accelerators
KEPT_CLASSES = (0x01, 0x02, 0x03, 0x12)
LIVE = (
    "from flux_sdexec.containment.mapper.topology import Topology; print(Topology().export_xml())"
)

pytestmark = pytest.mark.skipif(
    not PLUGINS, reason="hwloc has no plugins here (Debian: apt-get install libhwloc-plugins)"
)


def live_topology(**env):
    """(XML, stderr) of this machine's topology read by ``Topology()`` in a new process."""
    run = subprocess.run(
        [sys.executable, "-c", LIVE],
        cwd=REPO,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return run.stdout, run.stderr


def sysfs_pci_kept():
    """PCI addresses sysfs lists whose class hwloc keeps."""
    found = set()
    for path in glob.glob("/sys/bus/pci/devices/*"):
        with open(os.path.join(path, "class")) as f:
            if int(f.read(), 16) >> 16 in KEPT_CLASSES:
                found.add(os.path.basename(path))
    return found


def test_every_plugin_loads():
    """hwloc reports no plugin that failed to load (undefined symbols under RTLD_LOCAL)."""
    _, stderr = live_topology(HWLOC_PLUGINS_VERBOSE="1")
    assert "Failed to load plugin" not in stderr, stderr


def test_pci_devices_found_by_the_pci_plugin():
    """With Linux's own PCI reading off, the live topology holds the PCI devices sysfs lists."""
    expected = sysfs_pci_kept()
    if not expected:
        pytest.skip("sysfs lists no storage, network, display or accelerator PCI device here")
    xml, _ = live_topology(HWLOC_COMPONENTS="-linux:pci")
    found = set(re.findall(r'type="PCIDev"[^>]*pci_busid="([^"]+)"', xml))
    assert expected <= found
