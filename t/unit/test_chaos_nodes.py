"""The chaos test on nodes, its pure parts: the node faults and the 1-3 node jobs of the plan
(t/chaos/schedule.py), and which job endings and drains a node fault explains
(t/chaos/nodeverdict.py, through t/chaos/verdict.py)."""

import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parents[1]))  # t/, for the chaos package

from chaos import nodeverdict, schedule, verdict  # noqa: E402
from chaos.schedule import Fault  # noqa: E402

HOSTS = {"0": "node0", "1": "node1", "2": "node2"}


def test_node_kinds_only_when_asked():
    """The 2-broker run's default draws no node fault; the nodes' default draws both, and
    every other kind but upgrade."""
    assert not {f.kind for f in schedule.fault_schedule(2, 300)} & set(schedule.NODE_KINDS)
    kinds = {f.kind for f in schedule.fault_schedule(2, 300, schedule.NODES_KINDS, ranks=3)}
    assert kinds == set(schedule.KINDS) - {"upgrade"} | set(schedule.NODE_KINDS)


def test_rank_0_broker_is_never_killed():
    """brokerkill draws ranks 1..N-1 only (rank 0's loss ends the instance); a manager kill
    may hit any node, rank 0's included."""
    plan = schedule.fault_schedule(6, 400, ["brokerkill", "managerkill"], ranks=3)
    assert {f.rank for f in plan if f.kind == "brokerkill"} == {1, 2}
    assert {f.rank for f in plan if f.kind == "managerkill"} == {0, 1, 2}
    assert all(0 <= f.arg <= 5 for f in plan if f.kind == "brokerkill")  # seconds down
    assert all(0 <= f.arg <= 3 for f in plan if f.kind == "managerkill")
    with pytest.raises(ValueError, match="brokerkill needs 2 brokers"):
        schedule.fault_schedule(6, 10, ["brokerkill"], ranks=1)


def test_ten_minutes_hold_enough_node_faults():
    """At one fault every 4 s or so (2 s gaps, restarts of 1-6 s), 600 s of any seed hold at
    least 10 broker kills and 10 manager kills: each is one of every 10 faults at least."""
    for seed in range(1, 6):
        kinds = [f.kind for f in schedule.fault_schedule(seed, 100, schedule.NODES_KINDS, ranks=3)]
        assert kinds.count("brokerkill") >= 10 and kinds.count("managerkill") >= 10


def test_node_faults_name_their_node():
    assert Fault(1.0, "brokerkill", 2.5, 2).describe() == "brokerkill rank 2 2.50s"
    assert Fault(1.0, "managerkill", 0.0, 0).describe() == "managerkill rank 0"
    assert Fault(1.0, "reexec", 0.0, 2).describe(every_rank=True) == "reexec rank 2"


def test_three_node_mix():
    """With 3 nodes: jobs of 1, 2 and 3 nodes, about 40% on one; the same seed, the same mix."""
    mix = schedule.job_mix(21, 3)
    nodes = [next(mix).nodes for _ in range(1000)]
    assert set(nodes) == {1, 2, 3}
    assert 350 <= nodes.count(1) <= 450
    again = schedule.job_mix(21, 3)
    assert [next(again).nodes for _ in range(1000)] == nodes


def test_methods_in_turn():
    """Each method for its period, in turn; period 0: the first throughout."""
    both = ["bgexec", "bulk-exec"]
    assert [schedule.method_at(t, both, 60) for t in (0, 59.9, 60, 119, 120)] == [
        "bgexec", "bgexec", "bulk-exec", "bulk-exec", "bgexec"]  # fmt: skip
    assert schedule.method_at(500, both, 0) == "bgexec"


def test_names_node_as_a_word():
    assert nodeverdict.names_node("node failure on node2 (rank 2)", "node2")
    assert not nodeverdict.names_node("node failure on node12 (rank 12)", "node1")
    assert not nodeverdict.names_node("job shell exec error on node0 (rank 0)", "node2")
    assert not nodeverdict.names_node(None, "node2")


def test_expand_idset():
    assert nodeverdict.expand_idset("0-2") == [0, 1, 2]
    assert nodeverdict.expand_idset("0,2-3") == [0, 2, 3]
    assert nodeverdict.expand_idset("") == []


FAULTS = [
    {"kind": "reexec", "rank": 2, "start": 50.0, "end": 51.0},
    {"kind": "brokerkill", "rank": 2, "start": 100.0, "end": 110.0},
    {"kind": "managerkill", "rank": 1, "start": 200.0, "end": 205.0},
]


def node_job(note, at, ranks=(0, 1, 2), clean=True, code=0):
    """A job that got one exception (``note`` at time ``at``) on ``ranks``."""
    events = [["submit", {}], ["start", {}],
              ["exception", {"type": "exec", "severity": 0, "note": note}],
              ["finish", {"status": 9}]] + ([["clean", {}]] if clean else [])  # fmt: skip
    stamps = [at - 5, at - 4, at, at + 0.5] + ([at + 1] if clean else [])
    return {"id": "f1", "jobid": 1, "nodes": len(ranks), "sleep": 1.0, "code": code,
            "events": events, "stamps": stamps, "ranks": list(ranks), "submit_error": None,
            "method": "bgexec"}  # fmt: skip


def explained(job):
    return nodeverdict.explaining_fault(job, FAULTS, {int(k): v for k, v in HOSTS.items()})


def test_an_exception_naming_the_killed_node_in_its_window_is_explained():
    """node failure on node2 during node2's broker kill; killed by node1's manager loss up to
    FAULT_WINDOW s after node1's manager answered again."""
    assert explained(node_job("node failure on node2 (rank 2)", 100.5)) == (
        "brokerkill of node2 at 100.0"
    )
    late = 205.0 + nodeverdict.FAULT_WINDOW
    assert explained(node_job("job shell exec error on broker node1 (rank 1): killed", late))


def test_what_no_node_fault_explains():
    """Another node named, a node the job did not use, outside the window, after a mere
    reexec, no exception at all, or a hang: the job is lost."""
    assert explained(node_job("node failure on node0 (rank 0)", 100.5)) is None
    assert explained(node_job("node failure on node2 (rank 2)", 100.5, ranks=(0, 1))) is None
    assert explained(node_job("node failure on node2 (rank 2)", 99.0)) is None
    assert explained(node_job("node failure on node2 (rank 2)", 110.0 + 61)) is None
    assert explained(node_job("terminated before first barrier on node2", 50.5)) is None
    assert explained(node_job("node failure on node2 (rank 2)", 100.5, clean=False)) is None
    no_exception = node_job("x", 100.5)
    del no_exception["events"][2], no_exception["stamps"][2]
    assert explained(no_exception) is None


def test_every_exception_must_be_explained():
    """Two exceptions: one explained is not enough."""
    job = node_job("node failure on node2 (rank 2)", 100.5)
    job["events"].insert(3, ["exception", {"type": "exec", "severity": 0, "note": "lost"}])
    job["stamps"].insert(3, 100.6)
    assert explained(job) is None


def test_drains_explained_by_a_fault_on_their_rank():
    """A drain up to DRAIN_WINDOW s after a fault on one of its ranks is explained."""
    drains = [{"ranks": [2], "timestamp": 52.0, "reason": "after the reexec"},
              {"ranks": [0], "timestamp": 101.0, "reason": "no fault on rank 0"},
              {"ranks": [1], "timestamp": 199.0, "reason": "before the fault"}]  # fmt: skip
    left = nodeverdict.unexplained_drains(drains, FAULTS)
    assert [d["reason"] for d in left] == ["no fault on rank 0", "before the fault"]


def node_result(jobs, **kw):
    return {"seed": 3, "duration": 120, "jobs": jobs, "hostnames": HOSTS, "fault_log": FAULTS,
            "faults": {"brokerkill": {"injected": 1, "skipped": 0, "failed": 0}},
            "answers": {"0": True, "1": True, "2": True}, "units_left": [], **kw}  # fmt: skip


def test_node_run_verdict():
    """A job ended by a node fault does not fail the run and is listed; a lost one does; so do
    a unit left on a node, a guest process left and a drain no fault explains."""
    ok = {**node_job("", 0), "events": [["finish", {"status": 0}], ["clean", {}]],
          "stamps": [1.0, 2.0], "id": "fok"}  # fmt: skip
    ended = {**node_job("node failure on node2 (rank 2)", 100.5), "id": "fend"}
    result = node_result([ok, ended])
    assert verdict.violations(result) == []
    lines = verdict.report(result)
    assert "jobs ended by node faults 1" in lines
    assert lines[-1].endswith("lost=0 units-left=0 faults=1 ended-by-node-faults=1")
    assert "jobs per method: bgexec 2" in lines
    lost = {**node_job("node failure on node0 (rank 0)", 100.5), "id": "flost"}
    bad = node_result(
        [ok, ended, lost],
        units_left=["node1 shell-0-fxyz:sys.service"],
        guest_procs_left=["node1 pid 42: flux-imp"],
        drains=[{"ranks": [0], "timestamp": 300.0, "reason": "epilog failed"}],
    )
    assert verdict.violations(bad) == [
        "1 of 3 jobs lost",
        "1 unit(s) of the instance left",
        "guest process left: node1 pid 42: flux-imp",
        "rank(s) [0] drained, nothing explains it: epilog failed",
    ]
    assert [jobid for jobid, _ in verdict.judge(bad)[0]] == ["flost"]


LOG = [
    "Dec 01 17:34:42.073309 UTC 2026 sdexec.err[1]: imp-shell-1-fkill:sys.service: unknown "
    "to systemd after the reconnect: ended\n",
    "Dec 01 17:34:42.100000 UTC 2026 sdexec.info[1]: imp-shell-1-fkill[42]: Killed by signal 9\n",
    "Dec 01 17:34:43.5 UTC 2026 sdexec.err[2]: imp-shell-2-fother.service: unknown to systemd "
    "after the reconnect: ended\n",
]
T_LOST = 1796146482.073309  # 2026-12-01 17:34:42.073309 UTC


def test_parse_lost_units():
    """The lines sdexec logs for a unit the restarted manager does not have, with its rank
    and UTC time; other lines are not."""
    assert nodeverdict.parse_lost_units(LOG) == [
        {"rank": 1, "unit": "imp-shell-1-fkill:sys.service", "time": T_LOST},
        {"rank": 2, "unit": "imp-shell-2-fother.service", "time": T_LOST + 1.426691},
    ]


def killed_job(jobid="fkill", status=9, ranks=(0, 1)):
    """A job without exception that finished with ``status``."""
    return {"id": jobid, "jobid": 1, "nodes": len(ranks), "sleep": 1.0, "code": 0,
            "events": [["start", {}], ["finish", {"status": status}], ["clean", {}]],
            "stamps": [T_LOST - 2, T_LOST, T_LOST + 1], "ranks": list(ranks),
            "submit_error": None}  # fmt: skip


def test_a_shell_lost_with_its_manager_explains_a_killed_job():
    """Status 9, no exception: explained only by sdexec's own line for this job's unit on a
    rank the job held, in the window of that rank's manager kill (the latest one)."""
    faults = [{"kind": "managerkill", "rank": 1, "start": T_LOST - 100, "end": T_LOST - 99},
              {"kind": "managerkill", "rank": 1, "start": T_LOST - 1, "end": T_LOST - 0.5},
              {"kind": "brokerkill", "rank": 2, "start": T_LOST - 1, "end": T_LOST}]  # fmt: skip
    lost = nodeverdict.parse_lost_units(LOG)
    hosts = {0: "node0", 1: "node1", 2: "node2"}

    def why(job, fault_log=faults):
        return nodeverdict.explaining_fault(job, fault_log, hosts, lost)

    assert why(killed_job()) == f"managerkill of node1 at {T_LOST - 1:.1f} (its shell there lost)"
    assert why(killed_job(status=3 << 8)) is None  # not killed: a wrong exit code
    assert why(killed_job(jobid="fother", ranks=(0, 2))) is None  # rank 2's was a broker kill
    assert why(killed_job(ranks=(0, 2))) is None  # not on rank 1
    assert why(killed_job(jobid="fkil")) is None  # another job's unit
    assert why(killed_job(), faults[:1]) is None  # the only manager kill long before
