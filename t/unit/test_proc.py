"""The per-process state machine, driven by PropertiesChanged sequences recorded from systemd.

Fixtures in t/fixtures/ were captured by t/fixtures/record.py against a real systemd
user instance; each test replays one and asserts the whole list of actions.
"""

import errno
import json
import pathlib
import signal
import syslog

from flux_sdexec.events import (
    ContainmentChecked,
    CheckContainment,
    AnswerWait,
    DrainOutput,
    GraceExpired,
    OutputDrained,
    ArmGrace,
    ArmTimer,
    CancelTimer,
    ClientGone,
    CloseChannels,
    KillUnit,
    Log,
    OutputClosed,
    Reap,
    ResetFailedUnit,
    Respond,
    RespondError,
    StartFailed,
    StartOutput,
    StopTimerExpired,
    StopUnit,
    UnitChanged,
    Unloading,
    WaitRequested,
    WaiterGone,
)
from flux_sdexec.machine import handle
from flux_sdexec.states import ProcState
from flux_sdexec.waits import ANSWER_GRACE, FIRST_WAIT_BOUND, RECORD_HOLD

from helpers import CHECK, new

FIXTURES = pathlib.Path(__file__).parent.parent / "fixtures"
EXEC_FAIL_TEXT = "unit process could not be started (systemd error 203, result exit-code)"


def signals(name):
    return json.loads((FIXTURES / f"{name}.json").read_text())["signals"]


def replay(proc, name, until=None, since=0):
    """Feed a recorded sequence, as the adapter would until the process is done."""
    actions = []
    for props in signals(name)[since:until]:
        if proc.state is ProcState.DONE:
            break  # the adapter stops watching a reaped unit
        actions += handle(proc, UnitChanged(props))
    return actions


def until_state(name, active_state):
    """The signals up to and including the first that reports ``active_state``."""
    return 1 + next(i for i, s in enumerate(signals(name)) if s.get("ActiveState") == active_state)


def pid_of(name):
    return next(s["ExecMainPID"] for s in signals(name) if s.get("ExecMainPID"))


def fg(**kw):
    return new(["/bin/true"], streams=("stdout", "stderr"), **kw)


def test_clean_exit_foreground():
    """true: started, finished 0, StopUnit, then ENODATA once unit gone and both EOFs seen."""
    proc = fg()
    pid = pid_of("exit-0")
    assert replay(proc, "exit-0") == [
        Respond({"type": "started", "pid": pid}),
        StartOutput(),
        Respond({"type": "finished", "status": 0}),
        StopUnit(),
    ]
    assert proc.state is ProcState.FINISHED
    assert handle(proc, OutputClosed("stdout")) == []
    assert handle(proc, OutputClosed("stderr")) == [RespondError(errno.ENODATA), Reap()]
    assert proc.state is ProcState.DONE


def test_exit_1_is_a_normal_finish():
    """false: a failed/failed unit is a normal finished with status 1<<8, then ResetFailedUnit."""
    proc = fg()
    actions = replay(proc, "exit-1") + handle(proc, OutputClosed("stdout"))
    actions += handle(proc, OutputClosed("stderr"))
    assert actions == [
        Respond({"type": "started", "pid": pid_of("exit-1")}),
        StartOutput(),
        Respond({"type": "finished", "status": 256}),
        ResetFailedUnit(),
        RespondError(errno.ENODATA),
        Reap(),
    ]


def test_exec_failure_is_enoent_without_started():
    """A missing binary: no started, one ENOENT naming systemd's error and result."""
    proc = new(["/notacmd"], streams=("stdout",))
    actions = replay(proc, "exec-fail") + handle(proc, OutputClosed("stdout"))
    assert actions == [
        StartOutput(),
        ResetFailedUnit(),
        RespondError(
            errno.ENOENT, "unit process could not be started (systemd error 203, result exit-code)"
        ),
        Reap(),
    ]


def test_signal_status():
    """SIGTERM from KillUnit gives wait status 15 (flux exec exits 143)."""
    proc = new(["sleep"], streams=())
    actions = replay(proc, "sigterm")
    assert Respond({"type": "finished", "status": 15}) in actions
    assert actions[-2:] == [RespondError(errno.ENODATA), Reap()]


def test_first_inactive_signal_is_not_the_end():
    """systemd's pre-start inactive/dead signal must not complete a process without streams."""
    proc = new(["/bin/true"], streams=())
    assert replay(proc, "exit-0", until=2) == []
    assert proc.state is ProcState.STARTING


def test_stop_timer_escalation():
    """deactivating arms the timer: SIGTERM, then the configured signal, then EDEADLK."""
    proc = fg(stop_timer_sec=5, stop_signal=signal.SIGUSR1)
    actions = replay(proc, "stop-timeout", until=until_state("stop-timeout", "deactivating"))
    assert actions[-1] == ArmTimer(5)
    assert handle(proc, StopTimerExpired()) == [KillUnit(signal.SIGTERM), ArmTimer(5)]
    assert handle(proc, StopTimerExpired()) == [KillUnit(signal.SIGUSR1), ArmTimer(5)]
    assert handle(proc, StopTimerExpired()) == [
        Log(syslog.LOG_ERR, "u.service: abandoning after 15s stop timeout"),
        RespondError(errno.EDEADLK, "SIGKILL timeout, unit may still be active"),
        CloseChannels(),
    ]
    assert proc.state is ProcState.RELEASING and not proc.visible


def test_abandoned_unit_let_go_when_it_ends():
    """After EDEADLK the unit is still watched: when its processes end at last
    (here: killed), the failed unit is reset and the process reaped, nothing more said."""
    proc = fg(stop_timer_sec=5)
    deactivated = until_state("stop-timeout", "deactivating")
    replay(proc, "stop-timeout", until=deactivated)
    for _ in range(3):
        handle(proc, StopTimerExpired())
    rest = []
    for props in signals("stop-timeout")[deactivated:]:
        rest += handle(proc, UnitChanged(props))
    assert rest == [ResetFailedUnit(), Reap()]
    assert proc.state is ProcState.DONE


def test_stop_timer_cancelled_when_unit_dies():
    """Leaving deactivating cancels the timer; a stale expiry then does nothing."""
    proc = fg(stop_timer_sec=5)
    actions = replay(proc, "stop-timeout")
    assert CancelTimer() in actions
    assert actions.index(CancelTimer()) > actions.index(ArmTimer(5))
    assert handle(proc, StopTimerExpired()) == []


def test_stop_timer_disabled_by_default():
    """Without SDEXEC_STOP_TIMER_SEC no timer is armed."""
    assert not any(isinstance(a, ArmTimer) for a in replay(fg(), "stop-timeout"))


def test_client_gone_kills_foreground_only():
    """A disconnect SIGKILLs a running foreground unit; background units are left alone."""
    proc = fg()
    replay(proc, "sigterm", until=6)
    assert handle(proc, ClientGone()) == [KillUnit(signal.SIGKILL)]
    bg = new(["sleep"], background=True, streams=("stdout", "stderr"))
    replay(bg, "sigterm", until=6)
    assert handle(bg, ClientGone()) == []


def test_background_logs_exit_and_never_sends_finished():
    """Background: started is the only response; the exit is logged."""
    proc = new(["/bin/false"], background=True, streams=("stdout", "stderr"))
    pid = pid_of("exit-1")
    actions = replay(proc, "exit-1")
    assert actions == [
        Respond({"type": "started", "pid": pid}),
        StartOutput(),
        Log(syslog.LOG_INFO, f"false[{pid}]: Exit 1"),
        ResetFailedUnit(),
    ]
    handle(proc, OutputClosed("stdout"))
    assert handle(proc, OutputClosed("stderr")) == [Reap()]
    assert proc.state is ProcState.DONE


def waitable():
    return new(
        ["/bin/false"],
        label="L",
        background=True,
        waitable=True,
        streams=("stdout", "stderr"),
    )


def finish(proc, name):
    replay(proc, name)
    handle(proc, OutputClosed("stdout"))
    return handle(proc, OutputClosed("stderr"))


def until_failed(name):
    """The signals up to systemd's first failed/failed, where a kept record stops."""
    return until_state(name, "failed")


def test_waitable_unit_is_kept_as_record_then_collected():
    """A finished waitable process is a ZOMBIE whose unit stays loaded (no ResetFailedUnit)
    until a wait collects status and output; then the failed unit is reset and, once
    systemd has forgotten it, reaped."""
    proc = waitable()
    proc.retained_output.add({"stream": "stdout", "rank": "0", "data": "x\n"}, 2)
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
    """A leftover unit found at load (active/exited) is collectable, for RECORD_HOLD from
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
            f"L[9]: no waiter after adoption: collectable for {RECORD_HOLD:g}s after the "
            f"first wait (at most {FIRST_WAIT_BOUND:g}s)",
        ),
        ArmGrace(FIRST_WAIT_BOUND),
    ]
    assert proc.state is ProcState.ZOMBIE
    assert handle(proc, WaitRequested("w"))[0] == AnswerWait("w", 1024)


def test_exec_failure_of_waitable_fails_the_exec_request():
    """A failure before started fails the exec request itself."""
    proc = new(["/notacmd"], background=True, waitable=True, streams=("stdout",))
    replay(proc, "exec-fail")
    actions = handle(proc, OutputClosed("stdout"))
    assert isinstance(actions[0], RespondError) and actions[0].errnum == errno.ENOENT
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


def test_nothing_follows_done():
    """An input for a process that is DONE (the adapter forgot it) does nothing."""
    proc = fg()
    finish(proc, "exit-0")
    assert proc.state is ProcState.DONE
    assert handle(proc, UnitChanged({"ActiveState": "active"})) == []
    assert handle(proc, StopTimerExpired()) == []
    assert proc.state is ProcState.DONE


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


def test_failed_post_start_check_is_eio_without_started():
    """With a containment check asked for, the pid first asks for the check; a failed
    check logs, SIGKILLs, and answers EIO once the unit is reaped, never "started"."""
    proc = new(["sh"], streams=("stdout",), post_start_check=CHECK)
    assert replay(proc, "sigterm", until=1) == [CheckContainment(pid_of("sigterm"), CHECK)]
    assert handle(proc, ContainmentChecked("AllowedCPUs not enforced")) == [
        Log(syslog.LOG_ERR, "u.service: post-start check failed: AllowedCPUs not enforced"),
        KillUnit(signal.SIGKILL),
        StartOutput(),
    ]
    actions = replay(proc, "sigterm") + handle(proc, OutputClosed("stdout"))
    assert not [a for a in actions if isinstance(a, Respond)]
    assert actions[-2:] == [RespondError(errno.EIO, "AllowedCPUs not enforced"), Reap()]


def test_zombie_never_rearms_its_stop_timer():
    """A later deactivating signal must not re-arm a zombie's timer: its status is final."""
    proc = new(["sh"], label="L", background=True, waitable=True, stop_timer_sec=1)
    replay(proc, "sigterm", until=6)
    handle(proc, UnitChanged({"ExecMainCode": 2, "ExecMainStatus": 15}))
    assert proc.state is ProcState.ZOMBIE
    assert handle(proc, UnitChanged({"ActiveState": "deactivating", "SubState": "stop"})) == []
    assert handle(proc, WaitRequested("w"))[0] == AnswerWait("w", 15)


def test_passed_post_start_check_lets_started_go_out():
    """A passed check releases the "started" response that waited for it."""
    proc = new(["sh"], streams=("stdout",), post_start_check=CHECK)
    replay(proc, "sigterm", until=1)
    assert handle(proc, ContainmentChecked(None)) == []
    actions = replay(proc, "sigterm", until=6)
    assert actions[:2] == [Respond({"type": "started", "pid": pid_of("sigterm")}), StartOutput()]


def test_wait_parked_before_started_gets_the_exec_failure():
    """A wait by label can arrive before "started": if the command cannot run, the
    waiter gets the same ENOENT as the exec request (found by the fuzz test)."""
    proc = new(["/notacmd"], label="L", background=True, waitable=True)
    handle(proc, WaitRequested("w"))
    actions = replay(proc, "exec-fail")
    assert [a for a in actions if isinstance(a, (RespondError, AnswerWait))] == [
        RespondError(errno.ENOENT, EXEC_FAIL_TEXT),
        AnswerWait("w", error=(errno.ENOENT, EXEC_FAIL_TEXT)),
    ]
    assert proc.state is ProcState.DONE


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


def test_refused_start_answers_its_errno_and_lets_nothing_go():
    """systemd's error reply to the start (UnitExists) fails the exec with EEXIST: the
    exec request and a wait parked on the label get it, the channels close, and no
    stop or reset is sent for a unit that is not ours."""
    proc = new(["sleep", "1"], label="L", background=True, waitable=True, streams=["stdout"])
    handle(proc, WaitRequested("w"))
    text = "Unit u.service was already loaded or has a fragment file."
    assert handle(proc, StartFailed(errno.EEXIST, text)) == [
        RespondError(errno.EEXIST, text),
        AnswerWait("w", error=(errno.EEXIST, text)),
        CloseChannels(),
        Reap(),
    ]
    assert proc.state is ProcState.DONE


def test_start_refused_after_signals_still_fails_the_foreground_exec():
    """A refusal read after the unit's first signals (two connections, no order) still
    answers the foreground exec once, with the errno systemd gave."""
    proc = new()
    handle(proc, UnitChanged({"ActiveState": "inactive", "SubState": "dead"}))
    actions = handle(proc, StartFailed(errno.EINVAL, "Invalid Type setting: bogus"))
    assert [a for a in actions if isinstance(a, RespondError)] == [
        RespondError(errno.EINVAL, "Invalid Type setting: bogus")
    ]
    assert proc.state is ProcState.DONE


def test_client_gone_before_the_start_ran_kills_once_it_runs():
    """A client that leaves while the unit's start job is still queued (no process yet):
    a SIGKILL now would find nothing to kill; it is sent once the process runs."""
    proc = fg()
    assert handle(proc, ClientGone()) == []
    actions = replay(proc, "sigterm", until=6)
    assert actions.count(KillUnit(signal.SIGKILL)) == 1
    assert actions.index(KillUnit(signal.SIGKILL)) > actions.index(
        Respond({"type": "started", "pid": pid_of("sigterm")})
    )
