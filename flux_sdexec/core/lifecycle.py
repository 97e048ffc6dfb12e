"""The handlers of table.py's rows: what each step of a process's life does.

Each handler gets a draft of the SdProc (machine.py commits it only if the
table allows the state the handler returns), the input, and the action list to
append to; it returns the next state. Pure: no flux, no pystemd, no os, no time.
"""

import errno
import signal
import syslog

from flux_sdexec.core import impfatal, responses
from flux_sdexec.core.events import (
    AnswerWait,
    CheckContainment,
    CloseChannels,
    KillUnit,
    Log,
    Respond,
    RespondError,
    ArmTimer,
)
from flux_sdexec.core.states import ExecAnswer, ProcState, StopStage
from flux_sdexec.core.waits import retain_or_drop

S = ProcState
UNLOADING_TEXT = "sdexec module is unloading"
DEADLOCK_TEXT = "SIGKILL timeout, unit may still be active"
NO_PID_TEXT = "Internal error: unfailed inactive.dead unit never received ExecMainPID property"
NO_CODE_TEXT = (
    "Internal error: unfailed inactive.dead unit never received "
    "ExecMainCode and ExecMainStatus properties."
)


# ---- unit phases ----


def post_start_check(p, event, out):
    p.calls.check_sent = True
    out.append(CheckContainment(p.unit.pid, p.calls.post_start_check))
    return p.state


def started(p, event, out):
    if p.answers.exec is ExecAnswer.NONE:
        p.answers.exec = ExecAnswer.STARTED
        out.append(Respond(responses.started(p.unit.pid)))
    out += p.start_output()
    if p.calls.kill_when_started:  # its client left before the process ran
        p.calls.kill_when_started = False
        out.append(KillUnit(signal.SIGKILL))
    return S.RUNNING


def exited(p, event, out):
    p.answers.exec = ExecAnswer.FINISHED
    u = p.unit
    if p.cmd.background:
        why = f"Killed by signal {u.status}" if u.signaled else f"Exit {u.status}"
        out.append(Log(syslog.LOG_INFO, f"{p.logname}[{p.pid}]: {why}"))
        if p.leaves_record:
            return retain_or_drop(p, out)
    elif impfatal.may_fail(p) or (p.error and p.owes_exec_response):
        # the answer, maybe an error instead, once the unit is gone
        p.answers.exec = ExecAnswer.FINISH_HELD
    else:
        out.append(Respond(responses.finished(u.wait_status)))
    return S.FINISHED


def unit_lost(p, event, out):
    """The unit is gone with its manager: the exec's answer is the error, whatever status
    the lost unit is then taken to have (unitstate.lost_signals)."""
    if p.error is None:
        p.error = (errno.ECONNRESET, event.text)
    return p.state


def exec_failed(p, event, out):
    result = f", result {p.unit.result}" if p.unit.result else ""
    text = f"unit process could not be started (systemd error {p.unit.status}{result})"
    p.error = (errno.ENOENT, text)
    if p.leaves_record:  # adopted: its record is the failed unit; a wait gets the error
        return terminal_error(p, out)
    return S.FAILED


def over(p, event, out):
    if p.unit.active_state == "failed":
        out += p.start_output()  # an exec failure never started the output: its EOFs are owed
    out += p.forget()
    return p.state


def deactivating(p, event, out):
    p.stop.stage = StopStage.SIGTERM
    out.append(ArmTimer(p.cmd.stop_timer_sec))
    return p.state


def gone(p, event, out):
    out += p.start_output()
    if p.output_open:
        return p.state
    impfatal.conclude(p, out)
    if p.error is None and p.unit.pid is None:
        p.error = (errno.EINVAL, NO_PID_TEXT)
    elif p.error is None and p.unit.code is None:
        p.error = (errno.EINVAL, NO_CODE_TEXT)
    if p.error is not None:
        return terminal_error(p, out)
    if not p.cmd.background:
        if p.answers.exec is ExecAnswer.FINISH_HELD:
            out.append(Respond(responses.finished(p.unit.wait_status)))
        out.append(RespondError(errno.ENODATA))
        return S.DONE
    return retain_or_drop(p, out)


def release_check(p, event, out):
    out += p.forget()
    return S.DONE if p.unit.gone else S.RELEASING


# ---- inputs ----


def same(p, event, out):
    return p.state


def output_chunk(p, event, out):
    text = event.data.decode(errors="replace")
    text = str.removesuffix(text, "\n")
    level = syslog.LOG_INFO if event.stream == "stdout" else syslog.LOG_ERR
    out.append(Log(level, f"{p.logname}[{p.pid}]: {text}"))
    if p.answers.imp_error is not None and event.stream == "stderr":
        p.answers.imp_error.see(event.data)
    if p.wait.retained is not None:
        io = responses.io_object(event.stream, event.rank, event.data, event.eof)
        p.wait.retained.add(io, len(event.data))
    return p.state


def output_closed(p, event, out):
    getattr(p, {"stdout": "out", "stderr": "err"}[event.stream]).eof = True
    return p.state


def start_failed(p, event, out):
    p.error = (event.errnum, event.text)
    if p.owes_exec_response:
        out.append(RespondError(event.errnum, event.text))
    elif p.cmd.background:
        out.append(Log(syslog.LOG_ERR, f"{p.unit.name}: start: {event.text}"))
    if p.wait.waiter is not None:
        out.append(AnswerWait(p.wait.waiter, error=p.error))
        p.wait.waiter = None
    out.append(CloseChannels())
    return S.DONE


def post_start_checked(p, event, out):
    p.calls.post_start_check = None
    if p.state is not S.STARTING or event.problem is None:
        return p.state
    # flux-core's order: log, store EIO, SIGKILL, read output; the error goes out once
    # the unit is reaped, and "started" never does
    out.append(Log(syslog.LOG_ERR, f"{p.unit.name}: post-start check failed: {event.problem}"))
    p.error = (errno.EIO, event.problem)
    out.append(KillUnit(signal.SIGKILL))
    out += p.start_output()
    return S.FAILED


def stop_timer_expired(p, event, out):
    stage, seconds = p.stop.stage, p.cmd.stop_timer_sec
    if stage is StopStage.IDLE:
        return p.state  # an expiry that raced with the cancel
    if stage is StopStage.SIGTERM:
        p.stop.stage = StopStage.SIGNAL
        out += [KillUnit(signal.SIGTERM), ArmTimer(seconds)]
        return p.state
    if stage is StopStage.SIGNAL:
        p.stop.stage = StopStage.ABANDON
        out += [KillUnit(p.cmd.stop_signal), ArmTimer(seconds)]
        return p.state
    p.stop.stage = StopStage.IDLE
    out.append(
        Log(syslog.LOG_ERR, f"{p.unit.name}: abandoning after {3 * seconds:g}s stop timeout")
    )
    p.error = (errno.EDEADLK, DEADLOCK_TEXT)
    state = terminal_error(p, out)
    if state is S.DONE:
        # systemd still has the unit: watch it until its processes end at last, then let
        # it go, so that an abandoned unit does not linger as failed
        out.append(CloseChannels())
        return S.RELEASING
    return state


def client_gone(p, event, out):
    if p.cmd.background or p.unit.gone:
        return p.state
    if p.unit.pid is None:  # the start job may still be queued: nothing to kill yet
        p.calls.kill_when_started = True
    else:
        out.append(KillUnit(signal.SIGKILL))
    return p.state


def unloading(p, event, out):
    if p.owes_exec_response:
        out.append(RespondError(errno.ENOSYS, UNLOADING_TEXT))
    if p.wait.waiter is not None:
        if event.hand_over and not event.answer_wait:
            why = "the shutdown hands the unit to the restarted instance"
            out.append(Log(syslog.LOG_INFO, f"{p.unit.name}: its wait is left unanswered: {why}"))
        else:
            out.append(AnswerWait(p.wait.waiter, error=(errno.ENOSYS, UNLOADING_TEXT)))
        p.wait.waiter = None
    if event.hand_over:  # handed over to the next sdexec (handoff.py): it adopts the unit
        what = f"{p.unit.name} ({p.unit.state}, pid {p.pid})"
        out.append(Log(syslog.LOG_INFO, f"left running for the next sdexec: {what}"))
    else:
        out += p.forget(final=True)  # the adapter sees the stop through within a grace period
    return S.DONE


# ---- shared steps ----


def terminal_error(p, out):
    errnum, text = p.error
    if p.owes_exec_response:
        out.append(RespondError(errnum, text))
        if p.wait.waiter is not None:  # a wait by label may be parked before "started"
            out.append(AnswerWait(p.wait.waiter, error=p.error))
            p.wait.waiter = None
        return S.DONE
    if p.cmd.background:
        out.append(Log(syslog.LOG_ERR, f"{p.logname}[{p.pid}]: {text}"))
        return retain_or_drop(p, out)
    return S.DONE
