"""A job shell's answered exit stays answerable while its job runs (issue 47).

A job of several ranks whose shell on one rank ended while the others run: job-exec got
that rank's status, and then it is reloaded (``flux sdexec upgrade``, ``flux module reload
job-exec``). The job-exec that reattaches asks every rank's shell by label again, the
finished one too: once the answer grace is over the record of a job shell is kept, hidden
from a second waiter of the client that got it, until its job is inactive (the orphan watch
asks, ``WatchJob``) or KEPT_MAX; the client that got it leaving revives it for the next
job-exec, answered once to each; a clean unload hands it over. A process that is no job shell goes
at the grace's end, as before.
"""

import syslog

from flux_sdexec.core import handoff, orphans
from flux_sdexec.core.events import (
    AnswerMaybeLost,
    AnswerWait,
    ArmGrace,
    GraceExpired,
    JobGone,
    LabelReused,
    Log,
    ResetFailedUnit,
    UnitChanged,
    Unloading,
    WaitRequested,
    WatchJob,
)
from flux_sdexec.core.machine import handle
from flux_sdexec.core.registry import Registry
from flux_sdexec.core.states import ProcState
from flux_sdexec.core.waits import ANSWER_GRACE, FIRST_WAIT_BOUND, KEPT_MAX

from helpers import new
from test_answer_grace import OUTPUT, Waiter, collected, running

S = ProcState


def kept(label="shell-0-f1", unit="shell-0-f1:t1.service"):
    """A job shell whose parked wait was answered to job-exec-1, its grace over."""
    p = running(label=label, unit=unit)
    registry = Registry()
    registry.add(p)
    collected(p, "job-exec-1")
    job = label.rsplit("-", 1)[1]
    text = f"{label}[{p.pid}]: answered; kept while job {job} runs, for a job-exec that reattaches"
    assert handle(p, GraceExpired()) == [
        Log(syslog.LOG_DEBUG, text),
        ArmGrace(KEPT_MAX),
        WatchJob(),
    ]
    return p, registry


def test_a_job_shell_answered_is_kept_hidden_while_its_job_runs():
    p, registry = kept()
    assert p.state is S.ANSWERED and p.wait.kept
    assert registry.find(-1, "shell-0-f1") is None  # a second waiter finds nothing
    assert orphans.suspect(p)  # its job is asked about


def test_each_job_exec_that_reattaches_gets_the_status_and_output_once():
    """job-exec removed (its disconnect), loaded again: its wait by label gets the status
    and the output tail, and the record is hidden and kept again: a second waiter finds
    nothing, the job-exec after the next reload gets it in its turn."""
    p, registry = kept()
    revived(p, registry)
    again = Waiter("job-exec-2")
    assert handle(p, WaitRequested(again)) == [
        AnswerWait(again, 256, OUTPUT),
        ArmGrace(ANSWER_GRACE),
    ]
    assert p.state is S.ANSWERED and registry.find(-1, "shell-0-f1") is None
    assert handle(p, GraceExpired())[-1] == WatchJob()
    revived(p, registry)


def revived(p, registry):
    """The client that got ``p``'s status leaves while its job runs: a zombie again."""
    actions = handle(p, AnswerMaybeLost(registry.label_taken(p)))
    text = (
        f"shell-0-f1[{p.pid}]: its waiter left while job f1 runs: collectable for 20s after "
        f"the first wait (at most {FIRST_WAIT_BOUND:g}s)"
    )
    assert actions == [Log(syslog.LOG_INFO, text), ArmGrace(FIRST_WAIT_BOUND)]
    assert registry.find(-1, "shell-0-f1") is p and not p.wait.kept


def test_a_kept_record_goes_once_its_job_is_inactive():
    p, _ = kept()
    reason = "job f1 is inactive"
    assert handle(p, JobGone(reason)) == [
        Log(syslog.LOG_INFO, f"shell-0-f1[{p.pid}]: {reason}: let go"),
        ResetFailedUnit(),
    ]
    assert p.state is S.RELEASING and not orphans.suspect(p)


def test_a_kept_record_goes_at_its_bound():
    p, _ = kept()
    text = f"shell-0-f1[{p.pid}]: kept {KEPT_MAX:g}s, let go"
    assert handle(p, GraceExpired()) == [Log(syslog.LOG_INFO, text), ResetFailedUnit()]


def test_a_label_a_new_exec_takes_is_never_revived():
    p, _ = kept()
    handle(p, LabelReused())
    assert p.state is S.RELEASING


def test_a_clean_unload_hands_a_kept_record_over():
    p, _ = kept()
    assert handoff.plan_unload([p], handoff.KEEP_WAITABLE, "run").hand_over == {p.unit.name}
    assert handle(p, Unloading(hand_over=True))[-1].__class__.__name__ == "Reap"


def test_a_process_that_is_no_job_shell_goes_at_the_grace_s_end():
    p = running(label="L", unit="L:t1.service")
    collected(p)
    assert handle(p, GraceExpired()) == [ResetFailedUnit()]


def test_a_revived_record_whose_job_ended_goes_when_the_watch_says_so():
    """job-exec reloaded after the job ended: nobody will ask for the revived record; it is
    still watched, and goes at the job's JobGone rather than at the first-wait bound."""
    p, registry = kept()
    revived(p, registry)
    assert orphans.suspect(p)
    reason = "job f1 is inactive"
    assert handle(p, JobGone(reason)) == [
        Log(syslog.LOG_WARNING, f"shell-0-f1[{p.pid}]: {reason}: let go"),
        ResetFailedUnit(),
    ]


def test_a_clean_unload_hands_over_a_job_shell_s_record_still_in_its_grace():
    """Its rank ended just before the upgrade: job-exec on rank 0 had the answer, and its
    removal's disconnect reaches only rank 0's sdexec, so nothing revives it here; the next
    sdexec adopts it all the same (a process that is no job shell still stops)."""
    p = running()
    collected(p)
    other = running(label="L", unit="L:t1.service")
    collected(other)
    assert handoff.plan_unload([p, other], handoff.KEEP_WAITABLE, "run").hand_over == {p.unit.name}


def test_an_adopted_job_shell_record_collected_is_kept_too():
    """An upgrade's sdexec adopted the shell, job-exec's reattach collected it: the next
    upgrade's job-exec asks again, so it has the grace and the keep, not an at-once end."""
    p = new(["sh"], label="shell-0-f1", background=True, waitable=True, adopted=True)
    props = {"ActiveState": "active", "SubState": "exited", "ExecMainPID": 9}
    handle(p, UnitChanged({**props, "ExecMainCode": 1, "ExecMainStatus": 0}))
    waiter = Waiter("job-exec-2")
    assert handle(p, WaitRequested(waiter)) == [AnswerWait(waiter, 0), ArmGrace(ANSWER_GRACE)]
    assert handle(p, GraceExpired())[-1] == WatchJob()
