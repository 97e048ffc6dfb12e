"""The chaos test's pure parts: its plan from a seed (t/chaos/schedule.py) and its verdict over
job records (t/chaos/verdict.py), without a broker or systemd."""

import sys
from pathlib import Path

import pytest

sys.path.append(str(Path(__file__).resolve().parents[1]))  # t/, for the chaos package

from chaos import schedule, verdict  # noqa: E402
from chaos.run import unit_globs  # noqa: E402
from chaos.schedule import Fault, JobSpec  # noqa: E402


def test_same_seed_same_faults_and_jobs():
    """A seed gives one fault sequence and one job mix, whatever else ran before."""
    a = schedule.fault_schedule(7, 50, long_stall=30)
    b = schedule.fault_schedule(7, 50, long_stall=30)
    jobs_a = [next(m) for m in [schedule.job_mix(7)] for _ in range(40)]
    jobs_b = [next(m) for m in [schedule.job_mix(7)] for _ in range(40)]
    assert a == b
    assert jobs_a == jobs_b
    assert a != schedule.fault_schedule(8, 50, long_stall=30)
    assert jobs_a != [next(m) for m in [schedule.job_mix(8)] for _ in range(40)]


def test_longer_run_replays_shorter_one_first():
    """The first faults of a longer plan are the shorter plan's (without a long stall)."""
    assert schedule.fault_schedule(3, 100)[:20] == schedule.fault_schedule(3, 20)


def test_kind_order_does_not_change_the_plan():
    """--kinds reexec,stall and --kinds stall,reexec plan the same faults."""
    assert schedule.fault_schedule(5, 30, ["reexec", "stall"]) == schedule.fault_schedule(
        5, 30, ["stall", "reexec"]
    )


def test_plan_stays_within_its_bounds():
    """Gaps of 1-3 s, stalls 1.5-5 s, module stops 0.5-1.5 s, ranks 0-1, every kind drawn."""
    plan = schedule.fault_schedule(11, 400)
    assert len(plan) == 400
    assert all(1.0 <= f.gap <= 3.0 for f in plan)
    assert all(1.5 <= f.arg <= 5.0 for f in plan if f.kind == "stall")
    assert all(0.5 <= f.arg <= 1.5 for f in plan if f.kind == "modstop")
    assert all(0.2 <= f.arg <= 1.0 for f in plan if f.kind == "clientkill")
    assert all(f.arg == 0 for f in plan if f.kind in ("reexec", "reload", "buskill", "upgrade"))
    assert {f.rank for f in plan} == {0, 1}
    assert {f.kind for f in plan} == set(schedule.KINDS)


def test_one_long_stall_an_eighth_of_the_faults_in():
    """With long_stall, exactly one longstall of that length, as fault count // 8."""
    plan = schedule.fault_schedule(4, 120, long_stall=30)
    assert [(i, f.arg) for i, f in enumerate(plan) if f.kind == "longstall"] == [(15, 30.0)]
    assert not [f for f in schedule.fault_schedule(4, 60) if f.kind == "longstall"]


def test_only_the_kinds_asked_for():
    """A plan for reexec alone is reexecs only; a long stall alone is that one fault."""
    assert {f.kind for f in schedule.fault_schedule(9, 50, ["reexec"])} == {"reexec"}
    assert [f.kind for f in schedule.fault_schedule(9, 50, [], long_stall=30)] == ["longstall"]


def test_bad_kinds_are_refused():
    """An unknown kind is named in the error; no kind at all is refused."""
    with pytest.raises(ValueError, match="unknown fault kind.*reboot"):
        schedule.fault_schedule(1, 10, ["reexec", "reboot"])
    with pytest.raises(ValueError, match="no fault kind"):
        schedule.fault_schedule(1, 10, [])


def test_job_mix_is_the_issue_mix():
    """1- and 2-node jobs, sleep below 1.5 s, exit codes 0-3, all of them drawn; a 2-node
    job's ranks end apart."""
    mix = schedule.job_mix(21)
    jobs = [next(mix) for _ in range(500)]
    assert {j.nodes for j in jobs} == {1, 2}
    assert {j.code for j in jobs} == {0, 1, 2, 3}
    assert all(0 <= j.sleep <= 1.5 for j in jobs)
    assert JobSpec(2, 0.5, 3).command() == ["sh", "-c", "sleep 0.50; exit 3"]
    assert all(j.spread == 0.0 for j in jobs if j.nodes == 1)
    assert any(j.spread > 1.0 for j in jobs if j.nodes > 1)  # ranks end seconds apart
    apart = JobSpec(2, 0.5, 3, 1.25).command()[2]
    assert apart.startswith("sleep 0.50; r=${FLUX_TASK_RANK:-0}; while") and "sleep 1.25" in apart


def test_fault_describe():
    """The log names the rank only where it matters, and the seconds when there are any."""
    assert Fault(1.0, "modstop", 0.8, 1).describe() == "modstop rank 1 0.80s"
    assert Fault(1.0, "reexec", 0.0, 1).describe() == "reexec"
    assert Fault(1.0, "stall", 2.314, 0).describe() == "stall 2.31s"


def job(code=0, events=None, **kw):
    """A job record as the run writes it; by default one that ended with exit ``code``."""
    if events is None:
        events = [["submit", {}], ["start", {}], ["finish", {"status": code << 8}], ["clean", {}]]
    return {"id": "f1", "jobid": 1, "nodes": 1, "sleep": 0.1, "code": code, "events": events,
            "submit_error": None, **kw}  # fmt: skip


def test_a_job_ending_with_its_code_is_fine():
    """Exit 0 and exit 3, as asked, no exception: nothing to report."""
    assert verdict.job_problems(job(0)) == []
    assert verdict.job_problems(job(3)) == []


def test_wrong_exit_code_exception_and_hang_are_problems():
    """Each way of losing a job is named, with what was seen."""
    wrong = job(2, [["finish", {"status": 1 << 8}], ["clean", {}]])
    signalled = job(0, [["finish", {"status": 9}], ["clean", {}]])
    exception = job(0, [["exception", {"type": "exec", "severity": 0,
                                       "note": "lost connection to systemd"}],
                        ["finish", {"status": 0}], ["clean", {}]])  # fmt: skip
    hung = job(1, [["submit", {}], ["start", {}]])
    no_finish = job(1, [["submit", {}], ["clean", {}]])
    assert verdict.job_problems(wrong) == ["finish status 256 (exit 1), expected exit 2"]
    assert verdict.job_problems(signalled) == ["finish status 9 (signal 9), expected exit 0"]
    assert verdict.job_problems(exception) == [
        "exception type=exec severity=0: lost connection to systemd"
    ]
    assert verdict.job_problems(hung) == ["not inactive after the chaos ended (last event: start)"]
    assert verdict.job_problems(no_finish) == ["inactive without a finish event"]
    assert verdict.job_problems(job(0, submit_error="Connection reset")) == [
        "submit failed: Connection reset"
    ]


def test_lost_jobs_in_submit_order():
    """Only the jobs with problems, by id, in the order they were submitted."""
    jobs = [job(0, id="a"), job(1, [["start", {}]], id="b"), job(2, id="c"),
            job(3, [["finish", {"status": 0}], ["clean", {}]], id="d")]  # fmt: skip
    assert [jobid for jobid, _ in verdict.lost_jobs(jobs)] == ["b", "d"]


def test_rss_bound():
    """A process that grew by more than the bound is named; one that grew less is not."""
    rss = {"rank 0 pid 5": [30000, 30000 + 64 * 1024], "rank 1 pid 6": [30000, 30001 + 64 * 1024]}
    assert verdict.rss_problems(rss) == [
        "rank 1 pid 6: RSS grew from 30000 kB to 95537 kB (bound: +65536 kB)"
    ]


def clean_result(**kw):
    """A run's result with nothing wrong in it."""
    return {"seed": 5, "duration": 60, "jobs": [job(1), job(2)],
            "faults": {"reexec": {"injected": 3, "skipped": 0, "failed": 0},
                       "upgrade": {"injected": 0, "skipped": 2, "failed": 0}},
            "skip_reasons": {"upgrade": "not available"},
            "answers": {"0": True, "1": True}, "units_left": [],
            "rss": {"rank 0 pid 5": [30000, 31000]}, **kw}  # fmt: skip


def test_a_clean_run_passes():
    """No violation; the report counts faults per kind and closes with PASS."""
    result = clean_result()
    assert verdict.violations(result) == []
    lines = verdict.report(result)
    assert "reexec             3        0       0" in lines
    assert "upgrade            0        2       0  (not available)" in lines
    assert "jobs run 2, lost 0; units left 0" in lines
    assert lines[-1] == "chaos: PASS seed=5 duration=60s jobs=2 lost=0 units-left=0 faults=3"


def test_every_violation_fails_the_run():
    """Lost jobs, units left (during or after), a silent rank, a failed fault, no jobs."""
    result = clean_result(
        jobs=[job(1), job(2, [["start", {}]])],
        units_left=["shell-0-f2-0:tabc.service"],
        units_left_after_shutdown=["x:tabc.service"],
        answers={"0": True, "1": "no answer within 60s"},
        fault_failures=["t=3.0s buskill: bus not back"],
        harness_errors=["flux start exited 1"],
    )
    assert verdict.violations(result) == [
        "1 of 2 jobs lost",
        "1 unit(s) of the instance left",
        "1 unit(s) left after the instance exited",
        "sdexec on rank 1 does not answer afterwards: no answer within 60s",
        "fault failed: t=3.0s buskill: bus not back",
        "flux start exited 1",
    ]
    assert verdict.report(result)[-1].startswith("chaos: FAIL seed=5 ")
    assert verdict.report(result)[-1].endswith(" lost=1 units-left=2 faults=3")
    assert verdict.violations(clean_result(jobs=[])) == ["no job ran"]


def _helper_failed(code, line, events=None):
    """A job whose shell flux-core's imp-exec-helper failed with ``line`` (exit 1, ended)."""
    events = events or [["finish", {"status": 1 << 8}], ["clean", {}]]
    exec_events = [["log", {"component": "flux-imp", "stream": "stderr", "data": line}],
                   ["log", {"component": "flux-imp", "stream": "stderr",
                            "data": "flux-imp: Fatal: exec: invalid json input\n"}]]  # fmt: skip
    return job(code, events, exec_events=exec_events)


def test_a_job_failed_by_the_helper_at_a_bus_loss_is_counted_apart():
    """Ended, and the helper's sdbus call lost to a bus loss: named apart, not lost."""
    bus_lost = "imp_exec_helper: GetUnitByInvocationID: Message recipient disconnected from message bus without replying\n"  # noqa: E501
    failed = _helper_failed(2, bus_lost)
    assert verdict.helper_failure(failed) == bus_lost.strip()
    result = clean_result(jobs=[job(0), dict(failed, id="fHelper")])
    assert verdict.violations(result) == []
    lines = verdict.report(result)
    assert "failed in flux-core's imp-exec-helper at a bus loss (not sdexec's): 1: fHelper" in lines
    assert lines[-1].endswith("lost=0 units-left=0 faults=3 helper-failed=1")


def test_a_helper_call_sent_on_a_bus_already_reset_counts_as_a_bus_loss():
    reset = "imp_exec_helper: GetUnitByInvocationID: error sending sdbus request: Connection reset by peer\n"  # noqa: E501
    assert verdict.helper_failure(_helper_failed(2, reset)) == reset.strip()
    other = "imp_exec_helper: GetUnitByInvocationID: error sending sdbus request: Invalid argument\n"  # noqa: E501
    assert verdict.helper_failure(_helper_failed(2, other)) is None


def test_other_helper_failures_and_hangs_stay_lost():
    """Another helper error, or a job not ended, is sdexec's to answer for: lost."""
    other = _helper_failed(
        0, "imp_exec_helper: GetUnitByInvocationID: No unit with the given invocation ID\n"
    )  # noqa: E501
    hung = _helper_failed(
        0,
        "imp_exec_helper: GetUnitByInvocationID: subscribe error: Message recipient disconnected from message bus without replying\n",  # noqa: E501
        events=[["start", {}]],
    )
    assert verdict.helper_failure(other) is None
    assert verdict.helper_failure(hung) is None
    result = clean_result(jobs=[dict(other, id="a"), dict(hung, id="b")])
    assert [jobid for jobid, _ in verdict.lost_jobs(result["jobs"])] == ["a", "b"]
    assert verdict.violations(result) == ["2 of 2 jobs lost"]


def test_a_drain_naming_a_helper_failed_job_is_explained_others_are_not():
    """sdexec drains a rank at the IMP's error: explained when the job is one the helper
    failed; any other drain fails the run (off the nodes, no fault explains a drain)."""
    bus_lost = "imp_exec_helper: GetUnitByInvocationID: Message recipient disconnected from message bus without replying\n"  # noqa: E501
    failed = dict(_helper_failed(2, bus_lost), id="fHelper")
    imp = "IMP error for job fHelper: flux-imp: Fatal: exec: invalid json input"
    other = "IMP error for job fOther: flux-imp: Fatal: exec: invalid json input"
    result = clean_result(
        jobs=[job(0), failed],
        drains=[{"ranks": [1], "timestamp": 5.0, "reason": imp}],
    )
    assert verdict.violations(result) == []
    assert f"  ranks [1] at 5.0: {imp}" in verdict.report(result)
    result["drains"].append({"ranks": [0], "timestamp": 9.0, "reason": other})
    assert verdict.violations(result) == [f"rank(s) [0] drained, nothing explains it: {other}"]


def test_with_bgexec_the_helper_line_is_found_in_the_instance_log():
    """bgexec's exec eventlog has no shell stderr: sdexec's log line for the job's unit is
    the evidence (the exception carries only the IMP's line)."""
    note = ("job shell exec error on broker vm (rank 0): flux-imp: Fatal: exec: invalid json "
            "input: '[' or '{' expected near end of file")  # fmt: skip
    events = [["exception", {"type": "exec", "severity": 0, "note": note}],
              ["finish", {"status": 256}], ["clean", {}]]  # fmt: skip
    line = ("Dec 01 18:48:47.831001 UTC 2026 sdexec.err[0]: imp-shell-0-fjzch1if[19497]: "
            "imp_exec_helper: GetUnitByInvocationID: Message recipient disconnected from "
            "message bus without replying")  # fmt: skip
    failed = job(0, events, id="fjzch1if", log_lines=[line])
    assert verdict.helper_failure(failed).startswith("imp_exec_helper: GetUnitByInvocationID")
    assert verdict.helper_failure(job(0, events, id="fjzch1if")) is None  # no evidence: lost


def test_units_left_count_keepers_and_accounting_slices():
    globs = unit_globs("sys", "*:sys.service", bulk_exec=False)
    assert globs == [
        "*:sys.service",
        "*:sys.slice",  # keepers: imp\\x2dshell\\x2d0\\x2d<id>\\x2d0:sys.slice
        "app-sdexec-*:sys_*.slice",
        "sdexec-guard-*-sys.service",
    ]
    bulk = unit_globs("sys", "*:sys.service", bulk_exec=True)
    assert bulk[len(globs) :] == [
        "imp-shell-*.service",
        "imp?x2dshell*.slice",
        "app-sdexec-imp*.slice",
    ]
