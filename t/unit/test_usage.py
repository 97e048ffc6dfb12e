"""Usage records over fake cgroup trees of each layout: unified, hybrid, legacy.

A tree holds what the kernel leaves in a unit's accounting slice once the unit's own cgroup
is gone (the files and formats of Linux 6.x); the adapter's reader finds them through a
mountinfo naming the mounts, as on a real host. The hybrid tree is this test machine.
"""

import types

import pytest

from flux_sdexec.adapters.usage import Accounting
from flux_sdexec.containment import cgroups, enforcement, usage
from flux_sdexec.containment.enforcement import ENFORCED, NOT_ENFORCED, Host, UnitCgroups

UNIT = "shell-0-fA1:tb.service"
SLICE = usage.accounting_slice(UNIT)
PARENT = f"/app.slice/{usage.PARENT_SLICE}"
CPU_STAT = "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\nnice_usec 0\n"


def mountinfo(cg, layout):
    if layout == cgroups.UNIFIED:
        return f"30 1 0:27 / {cg} rw - cgroup2 cgroup2 rw\n"
    lines = [
        f"{40 + n} 1 0:{40 + n} / {cg / c} rw - cgroup cgroup rw,{c}"
        for n, c in enumerate(("memory", "pids", "cpuacct"))
    ]
    if layout == cgroups.HYBRID:
        lines.append(f"30 1 0:27 / {cg / 'unified'} rw - cgroup2 cgroup2 rw")
    return "\n".join(lines) + "\n"


def tree(root, layout, **hierarchies):
    """A /proc and cgroup mounts under ``root``; ``hierarchies``: {name: {file: text}} of the
    slice's directory there (``v2`` is the cgroup2 mount)."""
    cg = root / "cgroup"
    (root / "proc" / "self").mkdir(parents=True)
    (root / "proc" / "self" / "mountinfo").write_text(mountinfo(cg, layout))
    for hierarchy, files in hierarchies.items():
        base = (
            cg
            if layout == cgroups.UNIFIED
            else cg / ("unified" if hierarchy == "v2" else hierarchy)
        )
        directory = base / PARENT.lstrip("/") / SLICE
        directory.mkdir(parents=True)
        for name, text in files.items():
            (directory / name).write_text(text)
    return str(root / "proc")


def record(proc, opts=None):
    """The adapter's record of a finished UNIT over the tree at ``proc``."""
    acc = Accounting(types.SimpleNamespace(), proc=proc)
    acc.parent = PARENT
    unit = types.SimpleNamespace(name=UNIT, finished=True, result=None, wait_status=0)
    p = types.SimpleNamespace(unit=unit, cmd=types.SimpleNamespace(opts=opts or {}), started_at=0)
    return acc._record(p)


def test_slice_name_escapes_what_systemd_reads_as_nesting():
    assert SLICE == "app-sdexec-shell\\x2d0\\x2dfA1:tb.slice"
    assert usage.accounting_slice("a b/c") == "app-sdexec-a\\x20b\\x2fc.slice"


def test_unified_gives_every_figure(tmp_path):
    files = {
        "cgroup.controllers": "cpu memory pids\n",
        "cpu.stat": CPU_STAT,
        "memory.peak": "52428800\n",
        "memory.events": "low 0\nhigh 0\nmax 12\noom 1\noom_kill 2\noom_group_kill 0\n",
        "pids.peak": "9\n",
    }
    rec = record(tree(tmp_path, cgroups.UNIFIED, v2=files))
    assert rec == {
        "cpu_user_s": 2.0,
        "cpu_sys_s": 0.5,
        "memory_peak": 52428800,
        "tasks_peak": 9,
        "oom_kills": 2,
        "wall_s": rec["wall_s"],
        "result": "success",
        "status": 0,
    }


def test_hybrid_reads_cpu_on_v2_memory_and_tasks_on_v1(tmp_path):
    proc = tree(
        tmp_path,
        cgroups.HYBRID,
        v2={"cgroup.controllers": "\n", "cpu.stat": CPU_STAT},
        memory={
            "memory.max_usage_in_bytes": "52690944\n",
            "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
        },
        pids={"pids.peak": "7\n"},
    )
    rec = record(proc)
    assert (rec["cpu_user_s"], rec["memory_peak"], rec["tasks_peak"]) == (2.0, 52690944, 7)
    assert rec["oom_kills"] == 1 and "null_reasons" not in rec


def test_hybrid_oom_kills_null_when_the_unit_had_its_own_memory_cgroup(tmp_path):
    """The client set MemoryAccounting: the kills were counted in the unit's cgroup, gone."""
    proc = tree(
        tmp_path,
        cgroups.HYBRID,
        v2={"cpu.stat": CPU_STAT},
        memory={"memory.max_usage_in_bytes": "4096\n", "memory.oom_control": "oom_kill 0\n"},
    )
    rec = record(proc, {"SDEXEC_PROP_MemoryAccounting": "yes"})
    assert rec["oom_kills"] is None
    assert "removed with the unit" in rec["null_reasons"]["oom_kills"]


def test_hybrid_non_root_manager_has_no_memory_figures(tmp_path):
    """No v1 memory cgroup for the slice: null with the reason, CPU still exact."""
    proc = tree(tmp_path, cgroups.HYBRID, v2={"cpu.stat": CPU_STAT})
    rec = record(proc)
    assert rec["cpu_sys_s"] == 0.5
    assert rec["memory_peak"] is None and rec["oom_kills"] is None
    assert "no memory cgroup of its own" in rec["null_reasons"]["memory_peak"]
    assert "pids.peak" in rec["null_reasons"]["tasks_peak"]


def test_legacy_reads_cpuacct(tmp_path):
    proc = tree(
        tmp_path,
        cgroups.LEGACY,
        cpuacct={"cpuacct.usage_user": "1500000000\n", "cpuacct.usage_sys": "250000000\n"},
        memory={"memory.max_usage_in_bytes": "8192\n", "memory.oom_control": "oom_kill 0\n"},
    )
    rec = record(proc)
    assert (rec["cpu_user_s"], rec["cpu_sys_s"], rec["memory_peak"], rec["oom_kills"]) == (
        1.5,
        0.25,
        8192,
        0,
    )


def test_no_slice_left_is_all_null_with_reasons(tmp_path):
    rec = record(tree(tmp_path, cgroups.UNIFIED))
    assert all(rec[f] is None for f in usage.FIELDS)
    assert set(rec["null_reasons"]) == set(usage.FIELDS)


class FakeBridge:
    def __init__(self):
        self.starts = []

    def start_transient_unit(self, unit, props, on_reply=None):
        self.starts.append((unit, props))


@pytest.mark.parametrize("layout", [cgroups.UNIFIED, cgroups.HYBRID])
def test_place_moves_memory_limits_to_the_slice_on_v1_only(tmp_path, layout):
    svc = types.SimpleNamespace(bridge=FakeBridge())
    acc = Accounting(svc, proc=tree(tmp_path, layout))
    props = [("ExecStart", "a(sasb)", []), ("MemoryMax", "t", 50 << 20), ("TasksMax", "t", 9)]
    out = acc.place(UNIT, props, {"SDEXEC_PROP_MemoryMax": "50M"})
    if layout == cgroups.UNIFIED:
        assert out == props + [("Slice", "s", SLICE)] and svc.bridge.starts == []
        return
    assert out == [props[0], props[2], ("Slice", "s", SLICE), ("MemoryAccounting", "b", False)]
    assert svc.bridge.starts == [(SLICE, [("MemoryAccounting", "b", True), props[1]])]


def test_place_leaves_a_client_slice_alone(tmp_path):
    svc = types.SimpleNamespace(bridge=FakeBridge())
    acc = Accounting(svc, proc=tree(tmp_path, cgroups.HYBRID))
    props = [("MemoryMax", "t", 1 << 20)]
    assert acc.place(UNIT, props, {"SDEXEC_PROP_Slice": "x.slice"}) == props


def _v1_memory_check(slice_name, limit):
    """The MemoryMax verdict of a hybrid unit with no memory cgroup of its own, in
    ``slice_name``, whose memory cgroup holds ``limit``."""
    unit_path = f"{PARENT}/{slice_name}/{UNIT}"
    slice_path = f"{PARENT}/{slice_name}"
    files = {
        ("v2", unit_path, "cgroup.procs"): "42\n",
        ("v2", unit_path, "cgroup.controllers"): "\n",
        ("memory", slice_path, "cgroup.procs"): "",
        ("memory", slice_path, "memory.limit_in_bytes"): f"{limit}\n",
    }
    cg = UnitCgroups(
        cgroups.HYBRID,
        {"v2": unit_path, "memory": slice_path},
        lambda h, d, n: files.get((h, d, n)),
    )
    [verdict] = enforcement.check({"MemoryMax": "50M"}, cg, UNIT, Host(mem_total=1 << 34))
    return verdict


def test_check_finds_a_v1_memory_limit_on_the_accounting_slice():
    verdict = _v1_memory_check(SLICE, 50 << 20)
    assert verdict.outcome == ENFORCED, verdict.reason


def test_check_does_not_take_another_parent_for_the_unit():
    verdict = _v1_memory_check("app-other.slice", 50 << 20)
    assert verdict.outcome == NOT_ENFORCED
    assert "no v1 memory cgroup" in verdict.reason
