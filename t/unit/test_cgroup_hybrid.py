"""Containment verdicts over a fake hybrid tree: v1 controllers and a v2 hierarchy with no
controllers (this project's test machine, systemd 252).
"""

from flux_sdexec.containment import cgroups, enforcement
from flux_sdexec.broker import containment_check
from flux_sdexec.containment.enforcement import ENFORCED, NOT_CHECKABLE, NOT_ENFORCED

from cgroup_trees import PID, GIB, UNIT, V1_MAX, Tree, hybrid_files


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
    cg = containment_check.unit_cgroups(PID, str(hybrid.proc))
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
