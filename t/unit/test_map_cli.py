"""python3 -m flux_sdexec.map: properties as JSON, without a broker."""

import json

from conftest import HWLOC

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
