"""The per-process state machine, driven by PropertiesChanged sequences recorded from systemd.

Fixtures in t/fixtures/ were captured by t/fixtures/record.py against a real systemd
user instance; each test replays one and asserts the whole list of actions.
"""

import errno
import json
import pathlib
import signal
import syslog

import pytest

from flux_sdexec.events import (
    ArmTimer,
    CancelTimer,
    ClientGone,
    CloseChannels,
    KillUnit,
    Log,
    OutputClosed,
    PostStartCheckFailed,
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
from flux_sdexec.proc import InvalidTransition, Proc
from flux_sdexec.states import ProcState

FIXTURES = pathlib.Path(__file__).parent.parent / "fixtures"


def signals(name):
    return json.loads((FIXTURES / f"{name}.json").read_text())["signals"]


def replay(proc, name, until=None):
    """Feed a recorded sequence, as the adapter would until the process is done."""
    actions = []
    for props in signals(name)[:until]:
        if proc.state is ProcState.DONE:
            break  # the adapter stops watching a reaped unit
        actions += proc.handle(UnitChanged(props))
    return actions


def until_state(name, active_state):
    """The signals up to and including the first that reports ``active_state``."""
    return 1 + next(i for i, s in enumerate(signals(name)) if s.get("ActiveState") == active_state)


def pid_of(name):
    return next(s["ExecMainPID"] for s in signals(name) if s.get("ExecMainPID"))


def fg(**kw):
    return Proc("u.service", ["/bin/true"], streams=("stdout", "stderr"), **kw)


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
    assert proc.handle(OutputClosed("stdout")) == []
    assert proc.handle(OutputClosed("stderr")) == [RespondError(errno.ENODATA), Reap()]
    assert proc.state is ProcState.DONE


def test_exit_1_is_a_normal_finish():
    """false: a failed/failed unit is a normal finished with status 1<<8, then ResetFailedUnit."""
    proc = fg()
    actions = replay(proc, "exit-1") + proc.handle(OutputClosed("stdout"))
    actions += proc.handle(OutputClosed("stderr"))
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
    proc = Proc("u.service", ["/notacmd"], streams=("stdout",))
    actions = replay(proc, "exec-fail") + proc.handle(OutputClosed("stdout"))
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
    proc = Proc("u.service", ["sleep"], streams=())
    actions = replay(proc, "sigterm")
    assert Respond({"type": "finished", "status": 15}) in actions
    assert actions[-2:] == [RespondError(errno.ENODATA), Reap()]


def test_first_inactive_signal_is_not_the_end():
    """systemd's pre-start inactive/dead signal must not complete a process without streams."""
    proc = Proc("u.service", ["/bin/true"], streams=())
    assert replay(proc, "exit-0", until=2) == []
    assert proc.state is ProcState.STARTING


def test_stop_timer_escalation():
    """deactivating arms the timer: SIGTERM, then the configured signal, then EDEADLK."""
    proc = fg(stop_timer_sec=5, stop_signal=signal.SIGUSR1)
    actions = replay(proc, "stop-timeout", until=until_state("stop-timeout", "deactivating"))
    assert actions[-1] == ArmTimer(5)
    assert proc.handle(StopTimerExpired()) == [KillUnit(signal.SIGTERM), ArmTimer(5)]
    assert proc.handle(StopTimerExpired()) == [KillUnit(signal.SIGUSR1), ArmTimer(5)]
    assert proc.handle(StopTimerExpired()) == [
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
        proc.handle(StopTimerExpired())
    rest = []
    for props in signals("stop-timeout")[deactivated:]:
        rest += proc.handle(UnitChanged(props))
    assert rest == [ResetFailedUnit(), Reap()]
    assert proc.state is ProcState.DONE


def test_stop_timer_cancelled_when_unit_dies():
    """Leaving deactivating cancels the timer; a stale expiry then does nothing."""
    proc = fg(stop_timer_sec=5)
    actions = replay(proc, "stop-timeout")
    assert CancelTimer() in actions
    assert actions.index(CancelTimer()) > actions.index(ArmTimer(5))
    assert proc.handle(StopTimerExpired()) == []


def test_stop_timer_disabled_by_default():
    """Without SDEXEC_STOP_TIMER_SEC no timer is armed."""
    assert not any(isinstance(a, ArmTimer) for a in replay(fg(), "stop-timeout"))


def test_client_gone_kills_foreground_only():
    """A disconnect SIGKILLs a running foreground unit; background units are left alone."""
    proc = fg()
    replay(proc, "sigterm", until=6)
    assert proc.handle(ClientGone()) == [KillUnit(signal.SIGKILL)]
    bg = Proc("u.service", ["sleep"], background=True, streams=("stdout", "stderr"))
    replay(bg, "sigterm", until=6)
    assert bg.handle(ClientGone()) == []


def test_background_logs_exit_and_never_sends_finished():
    """Background: started is the only response; the exit is logged."""
    proc = Proc("u.service", ["/bin/false"], background=True, streams=("stdout", "stderr"))
    pid = pid_of("exit-1")
    actions = replay(proc, "exit-1")
    assert actions == [
        Respond({"type": "started", "pid": pid}),
        StartOutput(),
        Log(syslog.LOG_INFO, f"false[{pid}]: Exit 1"),
        ResetFailedUnit(),
    ]
    proc.handle(OutputClosed("stdout"))
    assert proc.handle(OutputClosed("stderr")) == [Reap()]
    assert proc.state is ProcState.DONE


def waitable():
    return Proc(
        "u.service",
        ["/bin/false"],
        label="L",
        background=True,
        waitable=True,
        streams=("stdout", "stderr"),
    )


def finish(proc, name):
    replay(proc, name)
    proc.handle(OutputClosed("stdout"))
    return proc.handle(OutputClosed("stderr"))


def until_failed(name):
    """The signals up to systemd's first failed/failed, where a kept record stops."""
    return until_state(name, "failed")


def test_waitable_unit_is_kept_as_record_then_collected():
    """A finished waitable process is a ZOMBIE whose unit stays loaded (no ResetFailedUnit)
    until a wait collects status and output; then the failed unit is reset and, once
    systemd has forgotten it, reaped."""
    proc = waitable()
    proc.retained.add({"stream": "stdout", "rank": "0", "data": "x\n"}, 2)
    pid = pid_of("exit-1")
    assert replay(proc, "exit-1", until=until_failed("exit-1")) == [
        Respond({"type": "started", "pid": pid}),
        StartOutput(),
        Log(syslog.LOG_INFO, f"L[{pid}]: Exit 1"),
    ]
    assert proc.state is ProcState.ZOMBIE
    waiter = object()
    assert proc.handle(WaitRequested(waiter)) == [
        Respond(
            {"status": 256, "output": [{"stream": "stdout", "rank": "0", "data": "x\n"}]}, to=waiter
        ),
        ResetFailedUnit(),
    ]
    assert proc.state is ProcState.RELEASING and not proc.visible
    assert proc.handle(UnitChanged({"ActiveState": "inactive", "SubState": "dead"})) == [Reap()]
    assert proc.state is ProcState.DONE


def test_parked_waiter_answered_at_exit_and_survives_disconnect():
    """A parked wait is answered at exit; a gone waiter leaves the process waitable."""
    proc = waitable()
    replay(proc, "exit-1", until=6)
    first = object()
    assert proc.handle(WaitRequested(first)) == []
    assert proc.handle(WaiterGone()) == []
    second = object()
    proc.handle(WaitRequested(second))
    actions = replay(proc, "exit-1")
    # answered on the Service signal with the status, while the unit is still active;
    # StopUnit then, ResetFailedUnit when it turns failed, Reap when systemd forgot it
    assert actions[-4:] == [
        Respond({"status": 256}, to=second),
        StopUnit(),
        ResetFailedUnit(),
        Reap(),
    ]


def test_adopted_finished_unit_becomes_zombie_without_responses():
    """A leftover unit found at load (active/exited) is collectable and answers nothing."""
    proc = Proc("u.service", ["sh"], label="L", background=True, waitable=True, adopted=True)
    props = {
        "ActiveState": "active",
        "SubState": "exited",
        "ExecMainPID": 9,
        "ExecMainCode": 1,
        "ExecMainStatus": 4,
    }
    assert proc.handle(UnitChanged(props)) == [StartOutput(), Log(syslog.LOG_INFO, "L[9]: Exit 4")]
    assert proc.state is ProcState.ZOMBIE
    assert proc.handle(WaitRequested("w"))[0] == Respond({"status": 1024}, to="w")


def test_exec_failure_of_waitable_fails_the_exec_request():
    """A failure before started fails the exec request itself."""
    proc = Proc("u.service", ["/notacmd"], background=True, waitable=True, streams=("stdout",))
    replay(proc, "exec-fail")
    actions = proc.handle(OutputClosed("stdout"))
    assert actions[0].errnum == errno.ENOENT and actions[0].to is None
    assert proc.state is ProcState.DONE


def test_unloading_answers_everything_owed_and_stops_the_unit():
    """Unload: ENOSYS to the exec request and the parked waiter, StopUnit of a running unit."""
    proc = waitable()
    replay(proc, "sigterm", until=6)
    waiter = object()
    proc.handle(WaitRequested(waiter))
    assert proc.handle(Unloading()) == [
        RespondError(errno.ENOSYS, "sdexec module is unloading", to=waiter),
        StopUnit(),
        Reap(),
    ]
    fgproc = fg()
    replay(fgproc, "sigterm", until=6)
    assert fgproc.handle(Unloading())[0] == RespondError(errno.ENOSYS, "sdexec module is unloading")


def test_illegal_input_raises_and_changes_nothing():
    """A wait on a finished foreground process that is DONE is a bug: it raises, state kept."""
    proc = fg()
    finish(proc, "exit-0")
    assert proc.state is ProcState.DONE
    with pytest.raises(InvalidTransition):
        proc.handle(UnitChanged({"ActiveState": "active"}))
    assert proc.state is ProcState.DONE


def test_zombie_cancels_stop_timer_and_ignores_stale_expiry():
    """A waitable whose status is known needs no escalation: the timer is cancelled."""
    proc = Proc("u.service", ["sh"], label="L", background=True, waitable=True, stop_timer_sec=1)
    replay(proc, "sigterm", until=6)
    assert proc.handle(
        UnitChanged({"ActiveState": "deactivating", "SubState": "stop-sigterm"})
    ) == [ArmTimer(1)]
    actions = proc.handle(UnitChanged({"ExecMainCode": 2, "ExecMainStatus": 15}))
    assert actions[-1] == CancelTimer() and proc.state is ProcState.ZOMBIE
    assert proc.handle(StopTimerExpired()) == []


def test_failed_post_start_check_is_eio_without_started():
    """A failed post-start check logs, SIGKILLs, and answers EIO once the unit is reaped."""
    proc = Proc("u.service", ["sh"], streams=("stdout",))
    replay(proc, "sigterm", until=1)
    assert proc.handle(PostStartCheckFailed("AllowedCPUs not enforced")) == [
        Log(syslog.LOG_ERR, "u.service: post-start check failed: AllowedCPUs not enforced"),
        KillUnit(signal.SIGKILL),
        StartOutput(),
    ]
    actions = replay(proc, "sigterm") + proc.handle(OutputClosed("stdout"))
    assert not [a for a in actions if isinstance(a, Respond)]
    assert actions[-2:] == [RespondError(errno.EIO, "AllowedCPUs not enforced"), Reap()]


def test_zombie_never_rearms_its_stop_timer():
    """A later deactivating signal must not re-arm a zombie's timer: its status is final."""
    proc = Proc("u.service", ["sh"], label="L", background=True, waitable=True, stop_timer_sec=1)
    replay(proc, "sigterm", until=6)
    proc.handle(UnitChanged({"ExecMainCode": 2, "ExecMainStatus": 15}))
    assert proc.state is ProcState.ZOMBIE
    assert proc.handle(UnitChanged({"ActiveState": "deactivating", "SubState": "stop"})) == []
    assert proc.handle(WaitRequested("w"))[0] == Respond({"status": 15}, to="w")
