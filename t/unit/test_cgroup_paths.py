"""Containment: where the unit's cgroups are found (mounts, /proc/<pid>/cgroup, the unit's own
cgroup) over fake trees, and the 160-byte limit on every reason.
"""

from flux_sdexec.containment import cgroups
from flux_sdexec.broker import containment_check
from flux_sdexec.containment.enforcement import ENFORCED, NOT_ENFORCED

from cgroup_trees import PID, UNIT, SLICE, Tree, hybrid_files


def test_layout_is_read_from_the_mounts(tmp_path):
    for layout in (cgroups.UNIFIED, cgroups.HYBRID, cgroups.LEGACY):
        tree = Tree(tmp_path / layout, layout)
        assert containment_check.detect_layout(str(tree.proc)) == layout


def test_proc_cgroup_and_co_mounted_controllers():
    paths = cgroups.parse_proc_cgroup("4:cpu,cpuacct:/a/b.service\n1:name=systemd:/a\n0::/a/x\n")
    assert paths == {
        "cpu": "/a/b.service",
        "cpuacct": "/a/b.service",
        "name=systemd": "/a",
        "v2": "/a/x",
    }
    mounts = cgroups.parse_mounts(
        "25 1 0:22 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
        "26 1 0:23 /lxc/c1 /sys/fs/cgroup/my\\040mem rw - cgroup cgroup rw,memory\n"
        "27 1 0:24 / /proc rw - proc proc rw\n"
    )
    assert mounts == {
        "cpu": ("/sys/fs/cgroup/cpu,cpuacct", "/"),
        "cpuacct": ("/sys/fs/cgroup/cpu,cpuacct", "/"),
        "memory": ("/sys/fs/cgroup/my mem", "/lxc/c1"),
    }
    assert cgroups.layout(mounts) == cgroups.LEGACY
    assert cgroups.fs_path("/sys/fs/cgroup/my mem", "/lxc/c1", "/lxc/c1/u.service") == (
        "/sys/fs/cgroup/my mem/u.service"
    )


def test_the_unit_cgroup_is_the_ancestor_named_after_the_unit():
    assert cgroups.unit_dir(f"{SLICE}/payload/inner", UNIT) == SLICE
    assert cgroups.unit_dir(SLICE, UNIT) == SLICE
    assert cgroups.unit_dir("/", UNIT) is None
    assert cgroups.unit_dir("/app.slice/other.service", UNIT) is None


def test_v1_limits_are_read_before_the_child_joined_its_cgroups(tmp_path):
    """systemd attaches the main pid to v2 at fork; the child joins the v1 ones later."""
    tree = Tree(tmp_path, cgroups.HYBRID)
    text = (tree.proc / str(PID) / "cgroup").read_text()
    early = "".join(
        line.rsplit(":", 1)[0] + ":/init.scope\n" if not line.startswith("0::") else line + "\n"
        for line in text.splitlines()
    )
    (tree.proc / str(PID) / "cgroup").write_text(early)
    tree.write("memory", **{"memory.limit_in_bytes": "52428800"})
    assert tree.verdicts({"MemoryMax": "50M", "AllowedCPUs": "0"}) == {
        "MemoryMax": (ENFORCED, "hybrid: v1 memory.limit_in_bytes is 52428800", "v1:memory"),
        "AllowedCPUs": (
            NOT_ENFORCED,
            "hybrid: v1 cpuset.cpus not read: the unit has no v1 cpuset cgroup"
            " (systemd sets AllowedCPUs only on cgroup v2)",
            "v1:cpuset",
        ),
    }


def test_limits_are_read_on_the_unit_cgroup_not_a_sub_cgroup(tmp_path):
    tree = Tree(tmp_path, cgroups.HYBRID)
    text = (tree.proc / str(PID) / "cgroup").read_text()
    (tree.proc / str(PID) / "cgroup").write_text(text.replace(SLICE, f"{SLICE}/payload"))
    tree.write("memory", **{"memory.limit_in_bytes": "52428800"})
    assert tree.verdicts({"MemoryMax": "50M"})["MemoryMax"][0] == ENFORCED


def test_every_reason_fits_flux_cores_error_text(tmp_path):
    """job-exec passes on an exec's error in a 160-byte flux_error_t: the reason must fit."""
    longest = []
    for n, layout in enumerate((cgroups.UNIFIED, cgroups.HYBRID, cgroups.LEGACY)):
        for own in (("memory", "pids", "cpu", "devices"), ()):
            tree = Tree(tmp_path / f"{n}{len(own)}", layout, own=own)
            if own and layout != cgroups.UNIFIED:
                hybrid_files(tree)
            wanted = {
                "AllowedCPUs": "0-1",
                "AllowedMemoryNodes": "0",
                "MemoryMax": "95%",
                "MemoryHigh": "1G",
                "MemorySwapMax": "1G",
                "TasksMax": "4%",
                "CPUQuota": "150%",
                "DevicePolicy": "strict",
                "DeviceAllow": "/dev/loop0 rw",
            }
            for v in containment_check.check_containment(PID, wanted, UNIT, str(tree.proc)):
                longest.append(len(f"{v.constraint} not enforced: {v.reason}".encode()))
    assert max(longest) < 160
