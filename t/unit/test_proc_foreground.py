"""The per-process state machine for foreground execs (exit, signals, exec failure, stop
timer, client gone) and background ones that log their exit, driven by PropertiesChanged
sequences recorded from systemd (t/fixtures/, captured by t/fixtures/record.py).
"""

import errno
import signal
import syslog

from flux_sdexec.core.events import (
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
    StartOutput,
    StopTimerExpired,
    StopUnit,
    UnitChanged,
)
from flux_sdexec.core.machine import handle
from flux_sdexec.core.states import ProcState

from helpers import signals, replay, until_state, pid_of, fg, finish, new


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


def test_nothing_follows_done():
    """An input for a process that is DONE (the adapter forgot it) does nothing."""
    proc = fg()
    finish(proc, "exit-0")
    assert proc.state is ProcState.DONE
    assert handle(proc, UnitChanged({"ActiveState": "active"})) == []
    assert handle(proc, StopTimerExpired()) == []
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
