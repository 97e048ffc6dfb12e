"""A unit's accounting slice and its usage record from the slice's cgroup files
(usage/cgroup_usage.py), over fake cgroup trees of each layout: unified, hybrid, legacy.
"""

import types

from usage_fixtures import CPU_STAT, SLICE, UNIT, Proc, accounting, proc, record, tree

from flux_sdexec.containment import cgroups
from flux_sdexec.usage import cgroup_usage
from flux_sdexec.usage.record import FIGURES

SLICED = types.SimpleNamespace(slice=SLICE, cgroup=None)  # an account: its slice


def test_slice_name_escapes_what_systemd_reads_as_nesting():
    assert SLICE == "app-sdexec-shell\\x2d0\\x2dfA1:tb_0a1b2c3d.slice"
    assert cgroup_usage.accounting_slice("a b/c", "1") == "app-sdexec-a\\x20b\\x2fc_1.slice"
    assert cgroup_usage.is_accounting_slice(SLICE) and not cgroup_usage.is_accounting_slice(
        "app.slice"
    )


def test_a_unit_whose_slice_name_would_be_too_long_gets_none(tmp_path):
    long = "x" * 240 + ".service"
    assert cgroup_usage.accounting_slice(long, "0a1b2c3d") is None
    acc = accounting(tree(tmp_path, cgroups.HYBRID))
    p = proc(long)
    assert acc.place(p, [("Type", "s", "exec")]) == [("Type", "s", "exec")]
    assert acc.slices([p]) == set()


def test_before_any_slice_was_located_every_figure_is_null_with_the_reason(tmp_path):
    acc = accounting(tree(tmp_path, cgroups.UNIFIED))
    unit = types.SimpleNamespace(
        name=UNIT, finished=True, result="signal", wait_status=9, started_at=0
    )
    p = Proc(unit=unit, cmd=types.SimpleNamespace(opts={}))
    rec = acc._record(p, SLICED).to_json()
    assert all(rec[f] is None for f in FIGURES) and rec["result"] == "signal"
    assert set(rec["null_reasons"].values()) == {
        "where the accounting slices are is not known "
        "yet (no unit's process seen alive since load)"
    }


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
        "cpu_s": 2.5,
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
        memory={"memory.max_usage_in_bytes": "52690944\n"},
        pids={"pids.peak": "7\n"},
    )
    rec = record(proc)
    assert (rec["cpu_user_s"], rec["memory_peak"], rec["tasks_peak"]) == (2.0, 52690944, 7)
    assert list(rec["null_reasons"]) == ["oom_kills"]  # no kernel log here: see below


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
        cpuacct={
            "cpuacct.usage": "1750000000\n",
            "cpuacct.usage_user": "1500000000\n",
            "cpuacct.usage_sys": "250000000\n",
        },
        memory={"memory.max_usage_in_bytes": "8192\n"},
    )
    rec = record(proc)
    assert (rec["cpu_user_s"], rec["cpu_sys_s"], rec["memory_peak"]) == (1.5, 0.25, 8192)
    assert rec["cpu_s"] == 1.75  # cpuacct.usage: the total, as v2's usage_usec


def test_no_slice_left_is_all_null_with_reasons(tmp_path):
    rec = record(tree(tmp_path, cgroups.UNIFIED))
    assert all(rec[f] is None for f in FIGURES)
    assert set(rec["null_reasons"]) == set(FIGURES)
