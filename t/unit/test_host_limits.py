"""N% limits are N% of what systemd scales by: the root cgroup's limits count (issue 22, #9).

systemd 252 (limits-util.c) takes the minimum of MemTotal and the root cgroup's memory limit,
and of pid_max - 1, threads-max and the root cgroup's pids.max; the root cgroup is PID 1's
without a trailing /init.scope. A checker that used MemTotal and pid_max alone called a
correctly applied limit "not enforced" in a limited container, and under ``enforce`` every
constrained job failed with EIO and drained its rank. The trees are cgroup_trees.py's.
"""

import pytest
from cgroup_trees import GIB, PAGE, Tree

from flux_sdexec.containment import cgroups, hostlimits
from flux_sdexec.containment import host
from flux_sdexec.containment.enforcement import ENFORCED, NOT_ENFORCED


def limit_root(tree, pid1_path, root, **files):
    """Give PID 1 the cgroup ``pid1_path`` and write ``files`` in the root cgroup ``root``."""
    (tree.proc / "1").mkdir()
    lines = [f"0::{pid1_path}"]
    if tree.layout != cgroups.UNIFIED:
        lines += [f"9:name=systemd:{pid1_path}", f"4:memory:{pid1_path}", f"8:pids:{pid1_path}"]
    (tree.proc / "1" / "cgroup").write_text("\n".join(lines) + "\n")
    for name, text in files.items():
        hierarchy = "v2" if tree.layout == cgroups.UNIFIED else name.partition(".")[0]
        directory = tree.dirs[hierarchy] / root.lstrip("/")
        directory.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(text + "\n")


@pytest.mark.parametrize(
    "pid1_path, root", [("/init.scope", "/"), ("/lxc/c1/init.scope", "/lxc/c1")]
)
def test_unified_container_memory_limit(tmp_path, pid1_path, root):
    """MemoryMax=50% in an 8 GiB container on a 16 GiB host is 4 GiB: enforced."""
    tree = Tree(tmp_path, cgroups.UNIFIED, v2_controllers="memory pids")
    limit_root(tree, pid1_path, root, **{"memory.max": str(8 * GIB), "pids.max": "1000"})
    tree.write("v2", **{"memory.max": str(4 * GIB), "pids.max": "100"})
    got = tree.verdicts({"MemoryMax": "50%", "TasksMax": "10%"})
    assert got == {
        "MemoryMax": (ENFORCED, f"unified: v2 memory.max is {4 * GIB}", "v2"),
        "TasksMax": (ENFORCED, "unified: v2 pids.max is 100", "v2"),
    }


def test_hybrid_container_memory_limit(tmp_path):
    """On hybrid the root's v1 memory.limit_in_bytes and pids.max count."""
    tree = Tree(tmp_path, cgroups.HYBRID)
    limit_root(
        tree, "/init.scope", "/", **{"memory.limit_in_bytes": str(2 * GIB), "pids.max": "500"}
    )
    tree.write("memory", **{"memory.limit_in_bytes": str(GIB)})
    tree.write("pids", **{"pids.max": "50"})
    got = tree.verdicts({"MemoryMax": "50%", "TasksMax": "10%"})
    assert {name: outcome for name, (outcome, _, _) in got.items()} == {
        "MemoryMax": ENFORCED,
        "TasksMax": ENFORCED,
    }


def test_the_host_value_is_still_checked(tmp_path):
    """A limit that is N% of MemTotal, not of the container, is now the wrong one."""
    tree = Tree(tmp_path, cgroups.UNIFIED, v2_controllers="memory")
    limit_root(tree, "/init.scope", "/", **{"memory.max": str(8 * GIB)})
    tree.write("v2", **{"memory.max": str(8 * GIB)})
    outcome, reason, _ = tree.verdicts({"MemoryMax": "50%"})["MemoryMax"]
    assert (outcome, reason) == (
        NOT_ENFORCED,
        f"unified: v2 memory.max is {8 * GIB}, expected 50% ({4 * GIB} bytes)",
    )


def test_no_root_limit_leaves_the_kernel_values(tmp_path):
    """'max', an unreadable root file or no /proc/1/cgroup: MemTotal and pid_max/threads-max."""
    tree = Tree(tmp_path, cgroups.UNIFIED)
    assert host.physical_memory(str(tree.proc)) == (16 * GIB, PAGE)
    assert host.tasks_limit(str(tree.proc)) == 192000
    limit_root(tree, "/init.scope", "/", **{"memory.max": "max", "pids.max": "max"})
    assert host.physical_memory(str(tree.proc)) == (16 * GIB, PAGE)
    assert host.tasks_limit(str(tree.proc)) == 192000


@pytest.mark.parametrize(
    "pid1_path, root",
    [
        ("/init.scope", "/"),
        ("/system.slice", "/"),
        ("/docker/abc/init.scope", "/docker/abc"),
        ("/docker/abc", "/docker/abc"),
        ("/", "/"),
    ],
)
def test_root_cgroup_is_pid1s_without_init_scope(pid1_path, root):
    assert hostlimits.root_cgroup(pid1_path) == root


def test_root_limits_round_to_pages_and_take_the_minimum():
    assert hostlimits.physical_memory(16 * GIB, PAGE, str(8 * GIB + 100)) == 8 * GIB
    assert hostlimits.physical_memory(16 * GIB, PAGE, str(32 * GIB)) == 16 * GIB
    assert hostlimits.physical_memory(16 * GIB, PAGE, str(2**64 - 1)) == 16 * GIB
    assert hostlimits.tasks_limit(4194304, 192000, "1000") == 1000
    assert hostlimits.tasks_limit(32768, 192000, None) == 32767
    assert hostlimits.tasks_limit(2**30, 2**30, "max") == hostlimits.TASKS_MAX
