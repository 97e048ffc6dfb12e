"""One sdexec process: unit facts in, ordered responses and systemd orders out.

``Proc.handle(event)`` checks the (state, input) pair against
``states.TRANSITIONS`` before touching anything, then returns the actions the
adapters must carry out, in order. The response order it guarantees:
started -> (output) -> finished -> (EOFs) -> ENODATA, or exactly one error.
Pure: no flux, no pystemd, no os, no time.
"""

import errno
import os
import signal
import syslog

from flux_sdexec import protocol
from flux_sdexec.events import (
    ArmTimer,
    CancelTimer,
    CloseChannels,
    KillUnit,
    Log,
    Reap,
    ResetFailedUnit,
    Respond,
    RespondError,
    StartOutput,
    StopUnit,
)
from flux_sdexec.linebuf import RetainedOutput
from flux_sdexec.states import TRANSITIONS, ProcState, StopStage
from flux_sdexec.unitstate import UnitStatus

S = ProcState
UNLOADING_TEXT = "sdexec module is unloading"
DEADLOCK_TEXT = "SIGKILL timeout, unit may still be active"


class InvalidTransition(RuntimeError):
    """An input arrived in a state that cannot take it: a bug in the caller."""


class Proc:
    """The life of one exec request's unit.

    Args:
        unit: the unit name.
        cmdline: argv, for the log name and ``sdexec.list``.
        label: the subprocess label or None.
        background: True for a non-streaming exec (RFC 42 background mode).
        waitable: keep the status for ``sdexec.wait`` (background only).
        streams: the output streams whose EOF we must see ({"stdout", "stderr"}).
        stop_timer_sec: stop-timer period, or None when disabled.
        stop_signal: the signal of the second expiry.
        adopted: a leftover unit found at load; no exec request waits for it.
    """

    def __init__(
        self,
        unit,
        cmdline,
        label=None,
        background=False,
        waitable=False,
        streams=(),
        stop_timer_sec=None,
        stop_signal=signal.SIGKILL,
        adopted=False,
    ):
        self.unit = unit
        self.cmdline = cmdline
        self.label = label
        self.background = background
        self.waitable = waitable
        self.stop_timer_sec = stop_timer_sec
        self.stop_signal = int(stop_signal)
        self.status = UnitStatus()
        self.state = S.STARTING
        self.stage = StopStage.IDLE
        self.error = None  # (errno, text) stored for the terminal response
        self.waiter = None
        self.retained = RetainedOutput() if waitable else None
        self._open_streams = set(streams)
        self._output_started = False
        self._started_sent = adopted
        self._finish_reported = False
        self._stop_sent = False
        self._reset_sent = False

    @property
    def pid(self):
        """ExecMainPID, or -1 before systemd reports it."""
        return self.status.pid if self.status.pid is not None else -1

    @property
    def logname(self):
        """Name used in log records: label, else argv[0]'s basename, else the unit."""
        return self.label or os.path.basename(self.cmdline[0]) or self.unit

    @property
    def keeps_record(self):
        """A started waitable process: its stopped-but-loaded unit holds the status
        until a wait collects it, so a restarted sdexec can still find it."""
        return self.waitable and self._started_sent

    @property
    def visible(self):
        """Listed and found by pid or label (a releasing process is only being let go)."""
        return self.state is not S.RELEASING

    @property
    def owes_exec_response(self):
        """The exec request still waits for a (terminal) response."""
        if self.state in (S.DONE, S.ZOMBIE, S.RELEASING):
            return False
        return not self.background or not self._started_sent

    def handle(self, event):
        """Apply one input and return the actions to carry out.

        Raises:
            InvalidTransition: the input is illegal in this state; nothing changed.
        """
        allowed = TRANSITIONS.get((self.state, type(event)))
        if allowed is None:
            raise InvalidTransition(f"{self.unit}: {type(event).__name__} in {self.state!r}")
        before = self.state
        actions = []
        new_state = getattr(self, "_on_" + type(event).__name__)(event, actions)
        if new_state not in allowed:
            raise InvalidTransition(f"{self.unit}: {before!r} -> {new_state!r}")
        self.state = new_state
        if new_state is S.DONE:
            actions.append(Reap())
        return actions

    # ---- inputs ----

    def _on_UnitChanged(self, event, out):
        st = self.status
        if not st.update(event.props):
            return self.state
        state = self.state
        if state is S.RELEASING:
            out += self._let_go()
            return S.DONE if st.gone else S.RELEASING
        if self.stage is not StopStage.IDLE and st.active_state != "deactivating":
            self.stage = StopStage.IDLE
            out.append(CancelTimer())
        if state is S.STARTING and st.started and self.error is None:
            if not self._started_sent:
                self._started_sent = True
                out.append(Respond(protocol.started(st.pid)))
            self._start_output(out)
            state = S.RUNNING
        if st.finished and not self._finish_reported and self.error is None:
            self._finish_reported = True
            self._report_finish(out)
            state = S.FINISHED
        if st.exec_failed and self.error is None:
            self.error = (errno.ENOENT, self._exec_failure_text())
            state = S.FAILED
        if st.state == "active.exited" and not self._stop_sent and not self.keeps_record:
            self._stop_sent = True
            out.append(StopUnit())
        if st.active_state == "deactivating" and self.stage is StopStage.IDLE:
            if self.stop_timer_sec is not None and state is not S.ZOMBIE:
                self.stage = StopStage.SIGTERM
                out.append(ArmTimer(self.stop_timer_sec))
        if st.active_state == "failed" and not self._reset_sent and not self.keeps_record:
            self._reset_sent = True
            self._start_output(out)
            out.append(ResetFailedUnit())
        if self.keeps_record and st.finished and state is S.FINISHED:
            return self._retain_or_drop(out)
        if st.gone:
            self._start_output(out)
        return self._complete_if_over(out, state)

    def _on_OutputClosed(self, event, out):
        self._open_streams.discard(event.stream)
        return self._complete_if_over(out, self.state)

    def _on_PostStartCheckFailed(self, event, out):
        # flux-core's order: log, store EIO, SIGKILL, read output; the error goes out once
        # the unit is reaped, and "started" never does
        out.append(Log(syslog.LOG_ERR, f"{self.unit}: post-start check failed: {event.text}"))
        self.error = (errno.EIO, event.text)
        out.append(KillUnit(signal.SIGKILL))
        self._start_output(out)
        return S.FAILED

    def _on_StopTimerExpired(self, event, out):
        if self.stage is StopStage.SIGTERM:
            self.stage = StopStage.SIGNAL
            out += [KillUnit(signal.SIGTERM), ArmTimer(self.stop_timer_sec)]
            return self.state
        if self.stage is StopStage.SIGNAL:
            self.stage = StopStage.ABANDON
            out += [KillUnit(self.stop_signal), ArmTimer(self.stop_timer_sec)]
            return self.state
        if self.stage is StopStage.ABANDON:
            self.stage = StopStage.IDLE
            seconds = 3 * self.stop_timer_sec
            out.append(
                Log(syslog.LOG_ERR, f"{self.unit}: abandoning after {seconds:g}s stop timeout")
            )
            self.error = (errno.EDEADLK, DEADLOCK_TEXT)
            state = self._terminal_error(out)
            if state is S.DONE:
                # systemd still has the unit: watch it until its processes end at last,
                # then let it go, so that an abandoned unit does not linger as failed
                out.append(CloseChannels())
                return S.RELEASING
            return state
        return self.state  # a stale expiry after the timer was cancelled

    def _on_ClientGone(self, event, out):
        if not self.background and not self.status.gone:
            out.append(KillUnit(signal.SIGKILL))
        return self.state

    def _on_WaitRequested(self, event, out):
        if self.state is S.ZOMBIE:
            return self._collect(event.waiter, out)
        self.waiter = event.waiter
        return self.state

    def _on_WaiterGone(self, event, out):
        self.waiter = None
        return self.state

    def _on_Unloading(self, event, out):
        if self.owes_exec_response:
            out.append(RespondError(errno.ENOSYS, UNLOADING_TEXT))
        if self.waiter is not None:
            out.append(RespondError(errno.ENOSYS, UNLOADING_TEXT, to=self.waiter))
        if event.keep:
            state = f"{self.status.state}, pid {self.pid}"
            out.append(
                Log(syslog.LOG_INFO, f"left running for the next sdexec: {self.unit} ({state})")
            )
        else:
            out += self._let_go()  # the adapter sees the stop through within a grace period
        return S.DONE

    def _let_go(self):
        """The next call that makes systemd forget a still loaded unit, if one is due.

        StopUnit only starts a stop: a unit that then ends failed needs a
        ResetFailedUnit later, so RELEASING keeps calling this on each change.
        """
        st = self.status
        if st.active_state == "failed" and not self._reset_sent:
            self._reset_sent = True
            return [ResetFailedUnit()]
        if st.active_state in ("active", "activating") and not self._stop_sent:
            self._stop_sent = True
            return [StopUnit()]
        return []

    # ---- helpers ----

    def _start_output(self, out):
        if not self._output_started:
            self._output_started = True
            out.append(StartOutput())

    def _report_finish(self, out):
        if self.background:
            out.append(Log(syslog.LOG_INFO, f"{self.logname}[{self.pid}]: {self._exit_text()}"))
        else:
            out.append(Respond(protocol.finished(self.status.wait_status)))

    def _exit_text(self):
        st = self.status
        if st.signaled:
            return f"Killed by signal {st.status}"
        return f"Exit {st.status}"

    def _exec_failure_text(self):
        result = f", result {self.status.result}" if self.status.result else ""
        return f"unit process could not be started (systemd error {self.status.status}{result})"

    def _complete_if_over(self, out, state):
        if not self.status.gone or self._open_streams or state in (S.ZOMBIE, S.DONE):
            return state
        if self.error is None:
            if self.status.pid is None:
                self.error = (
                    errno.EINVAL,
                    "Internal error: unfailed inactive.dead unit "
                    "never received ExecMainPID property",
                )
            elif self.status.code is None:
                self.error = (
                    errno.EINVAL,
                    "Internal error: unfailed inactive.dead unit never received "
                    "ExecMainCode and ExecMainStatus properties.",
                )
        if self.error is not None:
            return self._terminal_error(out)
        if not self.background:
            out.append(RespondError(errno.ENODATA))
            return S.DONE
        return self._retain_or_drop(out)

    def _terminal_error(self, out):
        errnum, text = self.error
        if self.owes_exec_response:
            out.append(RespondError(errnum, text))
            return S.DONE
        if self.background:
            out.append(Log(syslog.LOG_ERR, f"{self.logname}[{self.pid}]: {text}"))
            return self._retain_or_drop(out)
        return S.DONE

    def _retain_or_drop(self, out):
        if not self.waitable:
            return S.DONE
        if self.waiter is not None:
            waiter, self.waiter = self.waiter, None
            return self._collect(waiter, out)
        if self.stage is not StopStage.IDLE:
            self.stage = StopStage.IDLE  # its status is known: nothing left to escalate
            out.append(CancelTimer())
        return S.ZOMBIE

    def _collect(self, waiter, out):
        """Answer a wait with the status (or stored error), then let the unit go."""
        if self.error is not None:
            out.append(RespondError(*self.error, to=waiter))
        else:
            result = protocol.wait_result(self.status.wait_status, self.retained.items)
            out.append(Respond(result, to=waiter))
        out += self._let_go()
        return S.DONE if self.status.gone else S.RELEASING
