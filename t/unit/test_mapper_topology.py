"""hwloc topologies read through libhwloc: cores, NUMA nodes, PU counts and GPUs."""

import errno
import json
import shutil
import subprocess

import pytest
from conftest import xml

from flux_sdexec.containment.mapper.topology import Topology


def test_synthetic_counts():
    """2 packages x 2 NUMA x 4 cores x 2 PUs: 16 cores, 32 PUs."""
    t = Topology(xml("synthetic"))
    assert (t.count_cores(), t.count()) == (16, 32)


def test_smt_siblings_and_numa():
    """Core c has PUs c and c+16; cores 0-3 are NUMA 0, 4-7 NUMA 1, and so on."""
    t = Topology(xml("synthetic"))
    assert t.cores([0]) == ([0, 16], [0])
    assert t.cores([3, 4]) == ([3, 4, 19, 20], [0, 1])
    assert t.cores(range(16)) == (list(range(32)), [0, 1, 2, 3])
    assert t.cores([]) == ([], [])


def test_unknown_core():
    """A core the node lacks is ENOENT naming it."""
    with pytest.raises(OSError) as info:
        Topology(xml("synthetic")).cores([2, 16])
    assert (info.value.errno, info.value.strerror) == (
        errno.ENOENT,
        "core 16 not found in node topology",
    )


def test_gpus_in_logical_order():
    """CUDA+OpenCL of one device count once, RSMI partitions twice, NIC and DRM card never."""
    assert [g.parent for g in Topology(xml("synthetic")).gpus()] == [
        "0000:01:00.0",
        "0000:41:00.0",
        "0000:41:00.0",
        "0000:c1:00.0",
        "0000:e1:00.0",
    ]


def test_gpu_dedup_escape_hatch(monkeypatch):
    """FLUX_HWLOC_GPU_NO_DEDUP counts every backend's view, as flux-core's does."""
    monkeypatch.setenv("FLUX_HWLOC_GPU_NO_DEDUP", "1")
    assert [g.parent for g in Topology(xml("synthetic")).gpus()[:2]] == ["0000:01:00.0"] * 2


def test_this_machine_fixture():
    """The fixture of the machine that made it loads; every core maps to PUs and NUMA 0."""
    t = Topology(xml("this-machine"))
    cpus, nodes = t.cores(range(t.count_cores()))
    assert len(cpus) == t.count() and nodes == [0]


def test_bad_xml():
    """XML hwloc cannot read is EINVAL."""
    with pytest.raises(OSError) as info:
        Topology("<topology>not really</topology>")
    assert info.value.errno == errno.EINVAL


def test_export_round_trip():
    """This machine's topology exports to XML that loads with the same counts."""
    here = Topology()
    again = Topology(here.export_xml())
    assert (again.count(), again.count_cores()) == (here.count(), here.count_cores())


FLUX_CORE_CASES = """
import json, sys
from flux.sdexec.map import HwlocMapper
out = []
for path, cores in json.load(sys.stdin):
    m = HwlocMapper(open(path).read(), 0)
    out.append(m.map_cores(cores))
m._discover_gpu_devices = lambda addr: [addr]  # the PCI address of each logical GPU
out.append([m.map_gpus(str(i))["DeviceAllow"] for i in range(5)])
print(json.dumps(out))
"""


@pytest.mark.skipif(not shutil.which("flux"), reason="flux-core not installed")
def test_same_as_flux_core():
    """For the same XML, flux-core's HwlocMapper maps cores and orders GPUs as ours does."""
    from conftest import HWLOC

    from flux_sdexec.containment.mapper import HwlocMapper

    cases = [(str(HWLOC / "synthetic.xml"), c) for c in ("0", "0-1", "3-4", "0,5,10,15", "0-15")]
    cases += [(str(HWLOC / "this-machine.xml"), c) for c in ("0", "")]
    cases += [(str(HWLOC / "synthetic.xml"), "0")]  # its mapper also gives the GPU order
    run = subprocess.run(
        ["flux", "python", "-c", FLUX_CORE_CASES],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
    )
    if run.returncode != 0 and "No module named 'flux.sdexec'" in run.stderr:
        pytest.skip("this flux-core has no flux.sdexec.map")
    assert run.returncode == 0, run.stderr
    ours = [HwlocMapper(open(p).read()).map_cores(c) for p, c in cases]
    ours.append([g.parent for g in Topology(xml("synthetic")).gpus()])
    assert ours == json.loads(run.stdout)
