"""The per-process state machine for waitable and adopted units: the record kept after exit,
parked waiters, zombies and their stop timer, unload; driven by PropertiesChanged sequences
recorded from systemd (t/fixtures/).
"""

import errno
import syslog

from flux_sdexec.core.events import (
    AnswerWait,
    DrainOutput,
    GraceExpired,
    OutputDrained,
    ArmGrace,
    ArmTimer,
    CancelTimer,
    Log,
    Reap,
    ResetFailedUnit,
    Respond,
    RespondError,
    StartOutput,
    StopTimerExpired,
    StopUnit,
    UnitChanged,
    Unloading,
    WaitRequested,
    WaiterGone,
)
from flux_sdexec.core.machine import handle
from flux_sdexec.core.states import ProcState
from flux_sdexec.core.waits import ANSWER_GRACE, FIRST_WAIT_BOUND, CLAIM_WINDOW

from helpers import EXEC_FAIL_TEXT, replay, pid_of, fg, waitable, until_failed, new


def test_waitable_unit_is_kept_as_record_then_collected():
    """A finished waitable process is a ZOMBIE whose unit stays loaded (no ResetFailedUnit)
    until a wait collects status and output; then the failed unit is reset and, once
    systemd has forgotten it, reaped."""
    proc = waitable()
    proc.wait.retained.add({"stream": "stdout", "rank": "0", "data": "x\n"}, 2)
    pid = pid_of("exit-1")
    assert replay(proc, "exit-1", until=until_failed("exit-1")) == [
        Respond({"type": "started", "pid": pid}),
        StartOutput(),
        Log(syslog.LOG_INFO, f"L[{pid}]: Exit 1"),
    ]
    assert proc.state is ProcState.ZOMBIE
    waiter = object()
    # the wait first has the channels drained, so that the answer holds all output so far
    assert handle(proc, WaitRequested(waiter)) == [DrainOutput()]
    assert handle(proc, OutputDrained()) == [
        AnswerWait(waiter, 256, ({"stream": "stdout", "rank": "0", "data": "x\n"},)),
        ResetFailedUnit(),
    ]
    assert proc.state is ProcState.RELEASING and not proc.visible
    assert handle(proc, UnitChanged({"ActiveState": "inactive", "SubState": "dead"})) == [Reap()]
    assert proc.state is ProcState.DONE


def test_parked_waiter_answered_at_exit_and_survives_disconnect():
    """A parked wait is answered at exit; a gone waiter leaves the process waitable."""
    proc = waitable()
    replay(proc, "exit-1", until=6)
    first = object()
    assert handle(proc, WaitRequested(first)) == []
    assert handle(proc, WaiterGone()) == []
    second = object()
    handle(proc, WaitRequested(second))
    failed = until_failed("exit-1")
    actions = replay(proc, "exit-1", until=failed - 1, since=6)
    # the status arrives on the Service signal, while the unit is still active: the
    # output written so far is drained, then the wait answered and the grace armed;
    assert actions[-1] == DrainOutput()
    assert handle(proc, OutputDrained()) == [AnswerWait(second, 256), ArmGrace(ANSWER_GRACE)]
    # the unit fails on its own meanwhile; the grace's end resets it
    assert replay(proc, "exit-1", until=failed + 1, since=failed - 1) == []
    assert handle(proc, GraceExpired()) == [ResetFailedUnit()]
    assert replay(proc, "exit-1", since=failed + 1) == [Reap()]


def test_adopted_finished_unit_becomes_zombie_without_responses():
    """A leftover unit found at load (active/exited) is collectable, for CLAIM_WINDOW from
    the first wait since load, and answers nothing."""
    proc = new(["sh"], label="L", background=True, waitable=True, adopted=True)
    props = {
        "ActiveState": "active",
        "SubState": "exited",
        "ExecMainPID": 9,
        "ExecMainCode": 1,
        "ExecMainStatus": 4,
    }
    assert handle(proc, UnitChanged(props)) == [
        StartOutput(),
        Log(syslog.LOG_INFO, "L[9]: Exit 4"),
        Log(
            syslog.LOG_INFO,
            f"L[9]: no waiter after adoption: collectable for {CLAIM_WINDOW:g}s after the "
            f"first wait (at most {FIRST_WAIT_BOUND:g}s)",
        ),
        ArmGrace(FIRST_WAIT_BOUND),
    ]
    assert proc.state is ProcState.ZOMBIE
    assert handle(proc, WaitRequested("w"))[0] == AnswerWait("w", 1024)


def test_adopted_unit_found_ended_inactive_is_done_once_waited():
    """A leftover unit found inactive/dead with its exit status (an IMP's unit: STOPPING=1
    makes it end inactive; the predecessor's guard kept it loaded) has run and ended: the
    wait gets the status and the record goes, with nothing left to stop (site chaos run)."""
    proc = new(["sh"], label="L", background=True, waitable=True, adopted=True)
    props = {
        "ActiveState": "inactive",
        "SubState": "dead",
        "ExecMainPID": 9,
        "ExecMainCode": 1,
        "ExecMainStatus": 0,
    }
    proc.unit.found_at_load(props)
    handle(proc, UnitChanged(props))
    assert proc.state is ProcState.ZOMBIE
    assert handle(proc, WaitRequested("w")) == [AnswerWait("w", 0), Reap()]
    assert proc.state is ProcState.DONE


def test_unloading_answers_everything_owed_and_stops_the_unit():
    """Unload: ENOSYS to the exec request and the parked waiter, StopUnit of a running unit."""
    proc = waitable()
    replay(proc, "sigterm", until=6)
    waiter = object()
    handle(proc, WaitRequested(waiter))
    assert handle(proc, Unloading()) == [
        AnswerWait(waiter, error=(errno.ENOSYS, "sdexec module is unloading")),
        StopUnit(),
        Reap(),
    ]
    fgproc = fg()
    replay(fgproc, "sigterm", until=6)
    assert handle(fgproc, Unloading())[0] == RespondError(
        errno.ENOSYS, "sdexec module is unloading"
    )


def test_zombie_cancels_stop_timer_and_ignores_stale_expiry():
    """A waitable whose status is known needs no escalation: the timer is cancelled."""
    proc = new(["sh"], label="L", background=True, waitable=True, stop_timer_sec=1)
    replay(proc, "sigterm", until=6)
    assert handle(
        proc, UnitChanged({"ActiveState": "deactivating", "SubState": "stop-sigterm"})
    ) == [ArmTimer(1)]
    actions = handle(proc, UnitChanged({"ExecMainCode": 2, "ExecMainStatus": 15}))
    assert actions[-1] == CancelTimer() and proc.state is ProcState.ZOMBIE
    assert handle(proc, StopTimerExpired()) == []


def test_zombie_never_rearms_its_stop_timer():
    """A later deactivating signal must not re-arm a zombie's timer: its status is final."""
    proc = new(["sh"], label="L", background=True, waitable=True, stop_timer_sec=1)
    replay(proc, "sigterm", until=6)
    handle(proc, UnitChanged({"ExecMainCode": 2, "ExecMainStatus": 15}))
    assert proc.state is ProcState.ZOMBIE
    assert handle(proc, UnitChanged({"ActiveState": "deactivating", "SubState": "stop"})) == []
    assert handle(proc, WaitRequested("w"))[0] == AnswerWait("w", 15)


def test_adopted_unit_that_could_not_exec_is_a_zombie_with_its_error():
    """An adopted unit found failed with an exec failure keeps its record: a wait gets
    the ENOENT, then the unit is reset (found by the fuzz test)."""
    proc = new(["sh"], label="L", background=True, waitable=True, adopted=True)
    props = {"ActiveState": "failed", "SubState": "failed", "Result": "exit-code"}
    props.update({"ExecMainPID": 9, "ExecMainCode": 1, "ExecMainStatus": 203})
    handle(proc, UnitChanged(props))
    assert proc.state is ProcState.ZOMBIE
    assert handle(proc, WaitRequested("w")) == [
        AnswerWait("w", error=(errno.ENOENT, EXEC_FAIL_TEXT)),
        ResetFailedUnit(),
    ]
