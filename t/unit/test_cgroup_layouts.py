"""Containment verdicts over fake /proc and cgroup trees of each layout: unified, hybrid, legacy.

The trees are what the kernel shows: a mountinfo naming the cgroup mounts (here under a
temporary directory), /proc/<pid>/cgroup with the process's path in each hierarchy, and the
unit's own directories holding the files systemd wrote. The hybrid tree is this project's
test machine (v1 controllers, a v2 hierarchy with no controllers, systemd 252).
"""

import pytest

from flux_sdexec.containment import cgroups, enforcement
from flux_sdexec.adapters import cgroup
from flux_sdexec.containment.enforcement import ENFORCED, NOT_CHECKABLE, NOT_ENFORCED

PID = 4242
GIB = 1 << 30
PAGE = 4096
UNIT = "shell-0-fA.service"
SLICE = f"/app.slice/{UNIT}"
V1_MAX = "9223372036854771712"  # v1's "no limit"
V1 = ("cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids")


class Tree:
    """A fake /proc and cgroup filesystems for PID in ``layout``.

    ``own``: the v1 controllers systemd gave the unit a cgroup of (the others stay at "/");
    ``v2_controllers``: the unit's v2 cgroup.controllers.
    """

    def __init__(
        self, root, layout, own=("memory", "pids", "cpu", "devices"), v2_controllers="", unit=UNIT
    ):
        self.root, self.layout, self.name = root, layout, unit
        slice_ = f"/app.slice/{unit}"
        self.proc = root / "proc"
        (self.proc / "self").mkdir(parents=True)
        (self.proc / str(PID)).mkdir()
        (self.proc / "sys" / "kernel").mkdir(parents=True)
        (self.proc / "sys" / "kernel" / "pid_max").write_text("4194304\n")
        (self.proc / "sys" / "kernel" / "threads-max").write_text("192000\n")
        (self.proc / "meminfo").write_text(f"MemTotal: {16 * GIB // 1024} kB\nMemFree: 1 kB\n")
        mounts, lines = [], []
        cg = root / "sys" / "fs" / "cgroup"
        if layout == cgroups.UNIFIED:
            mounts.append(f"30 1 0:27 / {cg} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate")
            self.dirs = {"v2": cg}
        else:
            v1 = [("name=systemd", "systemd")] + [(c, c) for c in V1]
            self.dirs = {}
            for n, (opt, sub) in enumerate(v1):
                mounts.append(f"{40 + n} 1 0:{40 + n} / {cg / sub} rw - cgroup cgroup rw,{opt}")
                self.dirs[opt] = cg / sub
                path = slice_ if opt == "name=systemd" or opt in own else "/"
                lines.append(f"{9 - n}:{opt}:{path}")
            if layout == cgroups.HYBRID:
                mounts.append(f"30 1 0:27 / {cg / 'unified'} rw - cgroup2 cgroup2 rw")
                self.dirs["v2"] = cg / "unified"
        lines.append(f"0::{slice_}" if layout != cgroups.LEGACY else "0::/")
        (self.proc / "self" / "mountinfo").write_text("\n".join(mounts) + "\n")
        (self.proc / str(PID) / "cgroup").write_text("\n".join(lines) + "\n")
        self.unit = {}
        for hierarchy, base in self.dirs.items():
            if hierarchy in ("v2", "name=systemd") or hierarchy in own:
                self.unit[hierarchy] = base / slice_.lstrip("/")
                self.unit[hierarchy].mkdir(parents=True)
                self.write(hierarchy, **{"cgroup.procs": str(PID)})
        if "v2" in self.unit:
            self.write("v2", **{"cgroup.controllers": v2_controllers})

    def write(self, hierarchy, **files):
        for name, text in files.items():
            (self.unit[hierarchy] / name).write_text(text + "\n")

    def verdicts(self, wanted):
        return {
            v.constraint: (v.outcome, v.reason, v.hierarchy)
            for v in cgroup.check_containment(PID, wanted, self.name, str(self.proc))
        }


@pytest.fixture
def unified(tmp_path):
    return Tree(tmp_path, cgroups.UNIFIED, v2_controllers="cpuset cpu memory pids")


@pytest.fixture
def hybrid(tmp_path):
    return Tree(tmp_path, cgroups.HYBRID)


@pytest.fixture
def legacy(tmp_path):
    return Tree(tmp_path, cgroups.LEGACY)


# --- path resolution ----------------------------------------------------------------------


def test_layout_is_read_from_the_mounts(tmp_path):
    for layout in (cgroups.UNIFIED, cgroups.HYBRID, cgroups.LEGACY):
        tree = Tree(tmp_path / layout, layout)
        assert cgroup.detect_layout(str(tree.proc)) == layout


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


# --- unified ------------------------------------------------------------------------------


def test_unified_enforced(unified):
    unified.write(
        "v2",
        **{
            "cpuset.cpus.effective": "0-3,8",
            "cpuset.mems.effective": "0",
            "memory.max": str(4 * GIB),
            "memory.high": str(16 * GIB * 5 // 100 // PAGE * PAGE),
            "memory.swap.max": "max",
            "pids.max": "5",
            "cpu.max": "20000 100000",
        },
    )
    got = unified.verdicts(
        {
            "AllowedCPUs": "0,1,2,3,8",
            "AllowedMemoryNodes": "0",
            "MemoryMax": "4G",
            "MemoryHigh": "5%",
            "MemorySwapMax": "infinity",
            "TasksMax": "5",
            "CPUQuota": "20%",
        }
    )
    assert {name: (o, h) for name, (o, _, h) in got.items()} == {
        name: (ENFORCED, "v2") for name in got
    }
    assert len(got) == 7
    assert got["CPUQuota"][1] == "unified: v2 cpu.max is 20000 100000"


def test_unified_missing_controllers_name_the_file_and_controller(tmp_path):
    tree = Tree(tmp_path, cgroups.UNIFIED, v2_controllers="cpu")
    got = tree.verdicts({"AllowedCPUs": "0-1", "MemoryMax": "1G", "TasksMax": "5"})
    assert got["AllowedCPUs"] == (
        NOT_ENFORCED,
        "unified: v2 cpuset.cpus.effective unavailable"
        " (is cpuset controller delegated to the user instance?)",
        "none",
    )
    assert got["MemoryMax"][1] == (
        "unified: v2 memory.max unavailable (is memory controller delegated to the user instance?)"
    )
    assert got["TasksMax"][1].startswith("unified: v2 pids.max unavailable")


def test_unified_wrong_values(unified):
    unified.write(
        "v2",
        **{
            "cpuset.cpus.effective": "0-7",
            "cpuset.mems.effective": "",
            "memory.max": "max",
            "memory.high": str(GIB),
            "memory.swap.max": "0",
            "pids.max": "max",
            "cpu.max": "max 100000",
        },
    )
    got = unified.verdicts(
        {
            "AllowedCPUs": "0-1",
            "AllowedMemoryNodes": "1",
            "MemoryMax": "2G",
            "MemoryHigh": "infinity",
            "MemorySwapMax": "100M",
            "TasksMax": "5",
            "CPUQuota": "50%",
        }
    )
    reasons = {name: r for name, (o, r, _) in got.items() if o == NOT_ENFORCED}
    assert reasons == {
        "AllowedCPUs": "unified: v2 cpuset.cpus.effective is 0-7, expected 0-1",
        "AllowedMemoryNodes": "unified: v2 cpuset.mems.effective is (empty), expected 1",
        "MemoryMax": f"unified: v2 memory.max is max, expected 2G ({2 * GIB} bytes)",
        "MemoryHigh": f"unified: v2 memory.high is {GIB}, expected infinity",
        "MemorySwapMax": f"unified: v2 memory.swap.max is 0, expected 100M ({100 << 20} bytes)",
        "TasksMax": "unified: v2 pids.max is max, expected 5",
        "CPUQuota": "unified: v2 cpu.max is max 100000, expected 50% (50000 per 100000 µs)",
    }


def test_unified_tasks_max_percent_of_the_system_limit(unified):
    unified.write("v2", **{"pids.max": str(192000 * 15 // 100)})
    assert unified.verdicts({"TasksMax": "15%"})["TasksMax"][0] == ENFORCED
    unified.write("v2", **{"pids.max": "100"})
    assert unified.verdicts({"TasksMax": "15%"})["TasksMax"][0] == NOT_ENFORCED


def test_unified_devices_not_enforced_by_user_manager_unless_the_imp_applies_them(tmp_path):
    unified = Tree(tmp_path / "single", cgroups.UNIFIED)
    wanted = {"DevicePolicy": "closed", "DeviceAllow": "/dev/nvidia0 rw"}
    single = unified.verdicts(wanted)
    assert single["DevicePolicy"] == (
        NOT_ENFORCED,
        f"unified: {enforcement.USER_MANAGER_DEVICES}",
        "v2",
    )
    assert single["DeviceAllow"][0] == NOT_ENFORCED
    imp = Tree(tmp_path / "multi", cgroups.UNIFIED, unit="imp-shell-0-fA.service")
    multi = imp.verdicts(wanted)
    assert multi == {
        name: (NOT_CHECKABLE, f"unified: {enforcement.IMP_DEVICES}", "v2") for name in wanted
    }


def test_vanished_cgroup_is_not_checkable(unified):
    for f in unified.unit["v2"].iterdir():
        f.unlink()
    unified.unit["v2"].rmdir()
    got = unified.verdicts({"AllowedCPUs": "0", "MemoryMax": "1G"})
    assert got == {
        "AllowedCPUs": (NOT_CHECKABLE, "unified: the unit's cgroup is gone", "none"),
        "MemoryMax": (NOT_CHECKABLE, "unified: the unit's cgroup is gone", "none"),
    }


def test_gone_process_is_not_checkable(unified):
    (unified.proc / str(PID) / "cgroup").unlink()
    outcome, reason, _ = unified.verdicts({"MemoryMax": "1G"})["MemoryMax"]
    assert (outcome, reason) == (
        NOT_CHECKABLE,
        f"no cgroups for pid {PID}: No such file or directory",
    )


def test_a_process_outside_the_unit_is_not_checkable(unified):
    (unified.proc / str(PID) / "cgroup").write_text("0::/init.scope\n")
    outcome, reason, _ = unified.verdicts({"MemoryMax": "1G"})["MemoryMax"]
    assert outcome == NOT_CHECKABLE
    assert reason == "unified: the process is in no cgroup of the unit (v2:/init.scope)"


# --- hybrid (this machine) ----------------------------------------------------------------


def hybrid_files(tree):
    """What systemd 252 wrote for MemoryMax=50M TasksMax=5 CPUQuota=20% DevicePolicy=closed."""
    tree.write(
        "memory",
        **{
            "memory.limit_in_bytes": "52428800",
            "memory.memsw.limit_in_bytes": V1_MAX,
            "memory.soft_limit_in_bytes": V1_MAX,
        },
    )
    tree.write("pids", **{"pids.max": "5"})
    tree.write("cpu", **{"cpu.cfs_quota_us": "20000", "cpu.cfs_period_us": "100000"})
    tree.write("devices", **{"devices.list": "c 1:3 rwm\nc 1:5 rwm\nc 136:* rw\nb 7:0 r"})


def test_hybrid_enforced_limits_are_read_from_v1(hybrid):
    hybrid_files(hybrid)
    got = hybrid.verdicts(
        {
            "MemoryMax": "50M",
            "TasksMax": "5",
            "CPUQuota": "20%",
            "DevicePolicy": "closed",
            "DeviceAllow": "/dev/loop0 r",
        }
    )
    assert got == {
        "MemoryMax": (ENFORCED, "hybrid: v1 memory.limit_in_bytes is 52428800", "v1:memory"),
        "TasksMax": (ENFORCED, "hybrid: v1 pids.max is 5", "v1:pids"),
        "CPUQuota": (
            ENFORCED,
            "hybrid: v1 cpu.cfs_quota_us is 20000, cpu.cfs_period_us is 100000",
            "v1:cpu",
        ),
        "DeviceAllow": (
            ENFORCED,
            "hybrid: v1 devices.list allows 4 entries, not every device",
            "v1:devices",
        ),
        "DevicePolicy": (
            ENFORCED,
            "hybrid: v1 devices.list allows 4 entries, not every device",
            "v1:devices",
        ),
    }


def test_hybrid_device_allow_checks_each_resolved_node(hybrid):
    hybrid_files(hybrid)
    cg = cgroup.unit_cgroups(PID, str(hybrid.proc))
    cg = enforcement.UnitCgroups(
        cg.layout, cg.paths, cg.read, {"/dev/loop0": "b 7:0", "/dev/loop1": "b 7:1"}
    )
    host = enforcement.Host(16 * GIB)
    (loop0,) = enforcement.check({"DeviceAllow": "/dev/loop0 r"}, cg, UNIT, host)
    assert loop0.outcome == ENFORCED
    (both,) = enforcement.check({"DeviceAllow": "/dev/loop0 r, /dev/loop1 rw"}, cg, UNIT, host)
    assert (both.outcome, both.reason) == (
        NOT_ENFORCED,
        "hybrid: v1 devices.list does not allow b 7:1 rw (/dev/loop1)",
    )
    (write,) = enforcement.check({"DeviceAllow": "/dev/loop0 rw"}, cg, UNIT, host)
    assert write.outcome == NOT_ENFORCED


def test_hybrid_what_systemd_does_not_apply_on_v1(hybrid):
    hybrid_files(hybrid)
    got = hybrid.verdicts(
        {
            "AllowedCPUs": "0",
            "AllowedMemoryNodes": "0",
            "MemoryHigh": "40M",
            "MemorySwapMax": "10M",
        }
    )
    assert got["AllowedCPUs"] == (
        NOT_ENFORCED,
        "hybrid: v1 cpuset.cpus not read: the unit has no v1 cpuset cgroup"
        " (systemd sets AllowedCPUs only on cgroup v2)",
        "v1:cpuset",
    )
    assert got["AllowedMemoryNodes"][1].startswith("hybrid: v1 cpuset.mems not read")
    assert got["MemoryHigh"][0] == NOT_ENFORCED
    assert got["MemoryHigh"][1] == (
        "hybrid: MemoryHigh has no v1 equivalent (memory.high is v2 only;"
        " memory.soft_limit_in_bytes does not throttle)"
    )
    assert got["MemorySwapMax"] == (
        NOT_ENFORCED,
        "hybrid: v1 memory.memsw.limit_in_bytes has no limit"
        " (systemd sets MemorySwapMax only on v2)",
        "v1:memory",
    )


def test_hybrid_v1_memory_and_swap_semantics(hybrid):
    hybrid.write(
        "memory",
        **{
            "memory.limit_in_bytes": str(GIB),
            "memory.memsw.limit_in_bytes": str(GIB + (100 << 20)),
        },
    )
    got = hybrid.verdicts({"MemoryMax": "1G", "MemorySwapMax": "100M", "MemoryHigh": "infinity"})
    assert {name: o for name, (o, _, _) in got.items()} == {
        "MemoryMax": ENFORCED,
        "MemorySwapMax": ENFORCED,
        "MemoryHigh": ENFORCED,
    }
    got = hybrid.verdicts({"MemorySwapMax": "1G"})
    assert got["MemorySwapMax"] == (
        NOT_ENFORCED,
        "hybrid: v1 memory.memsw.limit_in_bytes - memory.limit_in_bytes is 104857600,"
        " expected 1G (1073741824 bytes)",
        "v1:memory",
    )
    hybrid.write(
        "memory", **{"memory.limit_in_bytes": V1_MAX, "memory.memsw.limit_in_bytes": V1_MAX}
    )
    assert hybrid.verdicts({"MemoryMax": "infinity", "MemorySwapMax": "infinity"}) == {
        "MemoryMax": (
            ENFORCED,
            f"hybrid: v1 memory.limit_in_bytes is {V1_MAX} (no limit)",
            "v1:memory",
        ),
        "MemorySwapMax": (
            ENFORCED,
            "hybrid: v1 memory.memsw.limit_in_bytes has no limit",
            "v1:memory",
        ),
    }


def test_hybrid_swap_accounting_off(hybrid):
    hybrid.write("memory", **{"memory.limit_in_bytes": str(GIB)})
    reason = hybrid.verdicts({"MemorySwapMax": "0"})["MemorySwapMax"][1]
    assert reason == (
        "hybrid: v1 memory.memsw.limit_in_bytes unavailable"
        " (swap accounting off: boot with swapaccount=1)"
    )


def test_hybrid_no_limit_in_v1_is_not_enforced(hybrid):
    hybrid.write("memory", **{"memory.limit_in_bytes": V1_MAX})
    hybrid.write("pids", **{"pids.max": "max"})
    hybrid.write("cpu", **{"cpu.cfs_quota_us": "-1", "cpu.cfs_period_us": "100000"})
    hybrid.write("devices", **{"devices.list": "a *:* rwm"})
    got = hybrid.verdicts(
        {"MemoryMax": "50M", "TasksMax": "5", "CPUQuota": "20%", "DevicePolicy": "closed"}
    )
    assert {name: r for name, (_, r, _) in got.items()} == {
        "MemoryMax": f"hybrid: v1 memory.limit_in_bytes is {V1_MAX} (no limit),"
        " expected 50M (52428800 bytes)",
        "TasksMax": "hybrid: v1 pids.max is max, expected 5",
        "CPUQuota": "hybrid: v1 cpu.cfs_quota_us is -1, cpu.cfs_period_us is 100000,"
        " expected 20% (20000 per 100000 µs)",
        "DevicePolicy": "hybrid: v1 devices.list allows every device (a *:* rwm)",
    }
    assert {o for o, _, _ in got.values()} == {NOT_ENFORCED}


def test_hybrid_imp_unit_with_no_device_list_is_not_checkable(tmp_path):
    imp = Tree(tmp_path, cgroups.HYBRID, unit="imp-shell-0-fA.service")
    imp.write("devices", **{"devices.list": "a *:* rwm"})
    got = imp.verdicts({"DevicePolicy": "closed"})
    assert got["DevicePolicy"] == (
        NOT_CHECKABLE,
        f"hybrid: {enforcement.IMP_DEVICES}",
        "v1:devices",
    )


def test_hybrid_controller_without_a_unit_cgroup(tmp_path):
    tree = Tree(tmp_path, cgroups.HYBRID, own=("memory",))
    got = tree.verdicts({"TasksMax": "5", "CPUQuota": "20%", "DevicePolicy": "closed"})
    assert got["TasksMax"] == (
        NOT_ENFORCED,
        "hybrid: v1 pids.max not read: the unit has no v1 pids cgroup",
        "v1:pids",
    )
    assert got["CPUQuota"][1].startswith("hybrid: v1 cpu.cfs_quota_us not read")
    assert got["DevicePolicy"] == (
        NOT_ENFORCED,
        "hybrid: v1 devices.list not read: the unit has no v1 devices cgroup",
        "v1:devices",
    )


def test_hybrid_controller_in_v2_wins(tmp_path):
    tree = Tree(tmp_path, cgroups.HYBRID, own=(), v2_controllers="memory")
    tree.write("v2", **{"memory.max": "52428800"})
    assert tree.verdicts({"MemoryMax": "50M"})["MemoryMax"] == (
        ENFORCED,
        "hybrid: v2 memory.max is 52428800",
        "v2",
    )


# --- legacy -------------------------------------------------------------------------------


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
            for v in cgroup.check_containment(PID, wanted, UNIT, str(tree.proc)):
                longest.append(len(f"{v.constraint} not enforced: {v.reason}".encode()))
    assert max(longest) < 160
