"""Containment verdicts over a fake unified (cgroup v2 only) tree."""

from flux_sdexec.containment import cgroups, enforcement
from flux_sdexec.containment.enforcement import ENFORCED, NOT_CHECKABLE, NOT_ENFORCED

from cgroup_trees import PID, GIB, PAGE, Tree


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


def test_unified_devices_enforced_where_a_bpf_device_program_is_attached(tmp_path):
    """Root's user manager attaches a BPF device program for DevicePolicy (the v2 guest:
    /dev/kmsg denied under closed): the kernel says so to root, and the verdict is enforced,
    for a multi-user unit too; a unit with none is not enforced, saying so; a DevicePolicy of
    auto without DeviceAllow restricts nothing."""
    wanted = {"DevicePolicy": "closed", "DeviceAllow": "/dev/nvidia0 rw"}
    single = Tree(tmp_path / "single", cgroups.UNIFIED)
    seen = []

    def one(path):
        seen.append(path)
        return 1

    text = "unified: v2 BPF device programs attached to the unit's cgroup: 1"
    assert single.verdicts(wanted, one) == {name: (ENFORCED, text, "v2") for name in wanted}
    assert seen and all(p.endswith(single.name) for p in seen)
    none = "unified: no BPF device program is attached to the unit's cgroup"
    assert single.verdicts(wanted, lambda path: 0)["DevicePolicy"] == (NOT_ENFORCED, none, "v2")
    imp = Tree(tmp_path / "multi", cgroups.UNIFIED, unit="imp-shell-0-fA.service")
    assert imp.verdicts(wanted, one)["DevicePolicy"] == (ENFORCED, text, "v2")
    auto = single.verdicts({"DevicePolicy": "auto"}, lambda path: 0)
    assert auto["DevicePolicy"] == (ENFORCED, "unified: DevicePolicy=auto restricts nothing", "v2")


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
