"""Containment verdicts over a fake legacy (cgroup v1 only) tree."""

from flux_sdexec.containment import cgroups
from flux_sdexec.containment.enforcement import ENFORCED, NOT_CHECKABLE, NOT_ENFORCED

from cgroup_trees import Tree, hybrid_files


def test_legacy_reads_v1_and_tracks_the_unit_by_name_systemd(legacy):
    hybrid_files(legacy)
    got = legacy.verdicts(
        {"MemoryMax": "50M", "TasksMax": "5", "CPUQuota": "20%", "AllowedCPUs": "0"}
    )
    assert {name: (o, h) for name, (o, _, h) in got.items()} == {
        "MemoryMax": (ENFORCED, "v1:memory"),
        "TasksMax": (ENFORCED, "v1:pids"),
        "CPUQuota": (ENFORCED, "v1:cpu"),
        "AllowedCPUs": (NOT_ENFORCED, "v1:cpuset"),
    }
    assert got["MemoryMax"][1] == "legacy: v1 memory.limit_in_bytes is 52428800"


def test_legacy_own_cpuset_cgroup_is_compared(tmp_path):
    tree = Tree(tmp_path, cgroups.LEGACY, own=("cpuset",))
    tree.write("cpuset", **{"cpuset.cpus": "0-1", "cpuset.mems": "0"})
    got = tree.verdicts({"AllowedCPUs": "0-1", "AllowedMemoryNodes": "1"})
    assert got["AllowedCPUs"] == (ENFORCED, "legacy: v1 cpuset.cpus is 0-1", "v1:cpuset")
    assert got["AllowedMemoryNodes"] == (
        NOT_ENFORCED,
        "legacy: v1 cpuset.mems is 0, expected 1",
        "v1:cpuset",
    )


def test_legacy_unit_gone(legacy):
    (legacy.unit["name=systemd"] / "cgroup.procs").unlink()
    assert legacy.verdicts({"TasksMax": "5"})["TasksMax"] == (
        NOT_CHECKABLE,
        "legacy: the unit's cgroup is gone",
        "none",
    )


def test_legacy_without_the_controller_hierarchy(tmp_path):
    tree = Tree(tmp_path, cgroups.LEGACY)
    mountinfo = tree.proc / "self" / "mountinfo"
    lines = mountinfo.read_text().splitlines()
    mountinfo.write_text("".join(line + "\n" for line in lines if "rw,pids" not in line))
    assert tree.verdicts({"TasksMax": "5"})["TasksMax"] == (
        NOT_ENFORCED,
        "legacy: no v1 pids hierarchy is mounted (pids.max not read)",
        "none",
    )
