"""The per-process state machine up to "started": the post-start containment check, exec
failures and starts systemd refused, with waiters parked before the start.
"""

import errno
import signal
import syslog

from flux_sdexec.core.events import (
    ContainmentChecked,
    CheckContainment,
    AnswerWait,
    CloseChannels,
    KillUnit,
    Log,
    OutputClosed,
    Reap,
    Respond,
    RespondError,
    StartFailed,
    StartOutput,
    UnitChanged,
    WaitRequested,
)
from flux_sdexec.core.machine import handle
from flux_sdexec.core.states import ProcState

from helpers import EXEC_FAIL_TEXT, replay, pid_of, CHECK, new


def test_exec_failure_of_waitable_fails_the_exec_request():
    """A failure before started fails the exec request itself."""
    proc = new(["/notacmd"], background=True, waitable=True, streams=("stdout",))
    replay(proc, "exec-fail")
    actions = handle(proc, OutputClosed("stdout"))
    assert isinstance(actions[0], RespondError) and actions[0].errnum == errno.ENOENT
    assert proc.state is ProcState.DONE


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
