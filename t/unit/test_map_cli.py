"""python3 -m flux_sdexec.map: properties as JSON, without a broker."""

import json

from conftest import H200, HWLOC, h200_xml, pci

from flux_sdexec.containment.mapper import command as cli

SYNTHETIC = str(HWLOC / "synthetic.xml")


def run(capsys, *args):
    rc = cli.main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def test_cores(capsys):
    """--cores over --xml prints the mapped properties."""
    rc, out, _ = run(capsys, "--xml", SYNTHETIC, "--cores", "0-3")
    assert rc == 0
    assert json.loads(out) == {
        "AllowedCPUs": "0-3,16-19",
        "AllowedMemoryNodes": "0",
        "DevicePolicy": "closed",
    }


def test_all_cores_by_default(capsys):
    """Without ids every core of the topology is mapped."""
    rc, out, _ = run(capsys, "--xml", SYNTHETIC)
    assert json.loads(out)["AllowedCPUs"] == "0-31"


def test_this_machine(capsys):
    """Without --xml the topology is this machine's, read by libhwloc."""
    rc, out, _ = run(capsys, "--cores", "0")
    assert rc == 0 and json.loads(out)["AllowedMemoryNodes"] == "0"


def test_allowed_devices(capsys):
    """--allowed-devices entries are appended to DeviceAllow."""
    rc, out, _ = run(capsys, "--xml", SYNTHETIC, "--cores", "0", "--allowed-devices", "/dev/null r")
    assert json.loads(out)["DeviceAllow"] == "/dev/null r"


def test_custom_mapper(capsys):
    """--mapper names any class with the (xml, rank) interface."""
    rc, out, _ = run(
        capsys,
        "--xml",
        SYNTHETIC,
        "--cores",
        "1",
        "--mapper",
        "flux_sdexec.containment.mapper.HwlocMapper",
    )
    assert (rc, json.loads(out)["AllowedCPUs"]) == (0, "1,17")


def test_errors_exit_1(capsys):
    """Unknown cores, bad patterns and bad classes exit 1 with the reason."""
    assert run(capsys, "--xml", SYNTHETIC, "--cores", "99")[2] == (
        "flux_sdexec.map: failed to map cores: core 99 not found in node topology\n"
    )
    assert "not a path under /dev/" in run(capsys, "--allowed-devices", "/etc/x")[2]
    assert run(capsys, "--mapper", "NoDots")[0] == 1
    assert run(capsys, "--mapper", "flux_sdexec.containment.mapper.ResourceMapper")[0] == 1


def test_list_gpus(capsys):
    """--list-gpus says, per GPU, its logical id, backend, osdev, PCI address and how found."""
    rc, out, _ = run(capsys, "--xml", SYNTHETIC, "--list-gpus")
    assert rc == 0
    assert out.splitlines()[:3] == [
        "GPU BACKEND OSDEV     PCI          FOUND",
        "0   CUDA    cuda0     0000:01:00.0 parent",
        "1   RSMI    rsmi0     0000:41:00.0 parent",
    ]


def test_list_gpus_real_node(capsys):
    """On the H200 node the address of its GPU comes from the one candidate."""
    h200 = ["--xml", str(H200 / "topo-opencl.xml"), "--root", str(H200 / "node")]
    rc, out, _ = run(capsys, *h200, "--list-gpus")
    assert (rc, out.splitlines()) == (
        0,
        [
            "GPU BACKEND OSDEV     PCI          FOUND",
            "0   OpenCL  opencl0d0 0000:00:06.0 the one candidate under bridge 0000:[00-00], "
            "confirmed by /proc/driver/nvidia/gpus/0000:00:06.0",
        ],
    )


def test_two_candidates(capsys, tmp_path):
    """Where two GPUs could be meant, mapping exits 1 naming them; the list says why."""
    topo = tmp_path / "two.xml"
    topo.write_text(h200_xml(pci("0000:00:07.0")))
    h200 = ["--xml", str(topo), "--root", str(H200 / "node")]
    rc, out, err = run(capsys, *h200, "--cores", "0-3", "--gpus", "0")
    assert (rc, out) == (1, "")
    assert "gpu0 (opencl0d0, OpenCL)" in err and "0000:00:06.0, 0000:00:07.0" in err
    rc, out, _ = run(capsys, *h200, "--list-gpus")
    assert rc == 1
    assert out.splitlines()[1].startswith("0   OpenCL  opencl0d0 -   none: 2 PCI devices under")


def test_list_no_gpu(capsys):
    """A topology without GPUs lists none and says what hwloc needs to show one."""
    rc, out, err = run(capsys, "--xml", str(H200 / "topo-no-gpu-backend.xml"), "--list-gpus")
    assert (rc, out) == (0, "GPU BACKEND OSDEV PCI FOUND\n")
    assert "no GPU in the topology" in err and "OpenCL" in err
