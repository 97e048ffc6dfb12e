"""SdProc: one exec request's process, field for field the design's ``struct sdproc``.

Data (plus the facts computed from it and the two orders every step may need:
StartOutput once, and the forget policy's next call). The decisions about it live in
lifecycle.py, the rules for which decision applies in table.py, and machine.py
applies them. The ``io`` slots hold the adapters' objects (sockets, watchers);
the core never looks at them. Pure: stdlib only.
"""

import os

from flux_sdexec.core.impfatal import watch_for
from flux_sdexec.core.events import ResetFailedUnit, StartOutput, StopUnit
from flux_sdexec.core.linebuf import RetainedOutput
from flux_sdexec.core.states import ProcState, StopStage
from flux_sdexec.core.unitstate import Unit, forget_call


class Channel:
    """One stdio channel (the design's struct channel): what the core knows of it."""

    __slots__ = ("name", "used", "eof", "io")

    def __init__(self, name, used):
        self.name = name  # stdin, stdout or stderr
        self.used = used  # this exec has the channel (a stream asked for, or stdin of a fg exec)
        self.eof = False  # EOF seen (output) or sent (input)
        self.io = None  # the adapter's socketpair end

    @property
    def open(self):
        """Output may still arrive on it."""
        return self.used and not self.eof

    def copy(self):
        c = Channel.__new__(Channel)
        c.name, c.used, c.eof, c.io = self.name, self.used, self.eof, self.io
        return c


class StopTimer:
    """Kill escalation state (the design's stop timer state)."""

    __slots__ = ("stage", "io")

    def __init__(self):
        self.stage = StopStage.IDLE  # what the next expiry does; IDLE: not armed
        self.io = None  # the adapter's timer watcher

    def copy(self):
        c = StopTimer.__new__(StopTimer)
        c.stage, c.io = self.stage, self.io
        return c


class SdProc:
    """One exec: request, command, calls, unit, channels, stop timer, responses.

    Args:
        exec_request: the adapter's request object (None for an adopted unit).
        cmd: the command, a ``protocol.ExecRequest``.
        unit: the unit name.
        adopted: a leftover unit found at load; it was started long ago.
    """

    def __init__(self, exec_request, cmd, unit, adopted=False):
        self.exec_request = exec_request  # the original request message; answers go to it
        self.adopted = adopted  # found at load, left by an earlier sdexec
        self.cmd = cmd  # the command: argv, env, label, flags, options
        self.start_sent = adopted  # StartTransientUnit was called
        self.stop_sent = False  # StopUnit was called
        self.reset_sent = False  # ResetFailedUnit was called
        self.watching = False  # PropertiesChanged of the unit are watched
        self.keeper = None  # the slice that keeps the unit loaded (systemd/keepers.py)
        self.unit = Unit(unit)  # what systemd last said about the unit
        streams = set(cmd.streams)
        self.in_ = Channel("stdin", not cmd.background)  # stdin
        self.out = Channel("stdout", "stdout" in streams)  # stdout
        self.err = Channel("stderr", "stderr" in streams)  # stderr
        self.output_started = False  # StartOutput was asked for
        self.stop = StopTimer()  # kill escalation
        self.post_start_check = cmd.post_start_check  # what to verify once the pid is known
        self.check_sent = False  # CheckContainment was asked for
        self.kill_when_started = False  # a fg client left before its process ran
        self.started_response_sent = adopted  # "started" answered (or logged, background)
        self.finished_response_sent = False  # "finished" answered (or exit logged, background)
        self.finish_held = False  # "finished" waits for the IMP's stderr (impfatal.py)
        self.imp_error = watch_for(cmd)  # the IMP's fatal line on stderr, if it runs the IMP
        self.error = None  # (errno, text) for the terminal response
        self.waiter = None  # the parked sdexec.wait request
        self.waiter_parked = False  # it came while the process ran (waits.py: the grace)
        self.answered_to = None  # the wait request last answered, during its grace (waits.py)
        self.held = False  # a zombie no waiter is known for, kept for a while (waits.py)
        self.revived = False  # collectable again after its answer may have been lost (waits.py)
        self.before_first_wait = adopted  # no sdexec.wait came since load (waits.py: the hold)
        self.grace = None  # the adapter's grace timer (ArmGrace)
        self.retained_output = RetainedOutput() if cmd.waitable else None  # tail for the wait
        self.state = ProcState.STARTING  # where the process is (table.py)
        self.started_at = None  # wall-clock start (epoch s), set by the adapter; sdexec.units
        self.usage = None  # what the unit used, read at its exit (broker/accounting.py)
        self.accounting_slice = None  # the slice of its own it runs in, if any (same)
        self.slice_stopped = False  # its accounting slice was stopped
        self.orphan = None  # why it is stopped: its job is over (orphans.py)
        self.job_seen = None  # what the last query of its job said (adapter; sdexec.units)

    def draft(self, unit=None):
        """A copy that a handler may change; ``commit()`` adopts it if the table allows.

        ``unit``: an already updated copy of the Unit to use. The retained output is
        shared: only OutputChunk rows, which never change the state, add to it.
        """
        d = SdProc.__new__(SdProc)
        d.__dict__.update(self.__dict__)
        d.unit = unit or self.unit.copy()
        d.in_, d.out, d.err = self.in_.copy(), self.out.copy(), self.err.copy()
        d.stop = self.stop.copy()
        return d

    def commit(self, draft):
        self.__dict__.update(draft.__dict__)

    # ---- the two orders every step may need, each given once ----

    def start_output(self):
        """[StartOutput] the first time, then []."""
        if self.output_started:
            return []
        self.output_started = True
        return [StartOutput()]

    def forget(self, final=False):
        """The next call that makes systemd forget the unit, by unitstate's one policy.

        ``final``: nothing will watch the unit after this (unload), so a start job still
        queued must be cancelled now; otherwise its run is watched and then stopped.
        """
        queued = final and not self.unit.left_inactive
        call = forget_call(self.unit.active_state, queued)
        if call == "reset-failed" and not self.reset_sent:
            self.reset_sent = True
            return [ResetFailedUnit()]
        if call == "stop" and not self.stop_sent:
            self.stop_sent = True
            return [StopUnit()]
        return []

    # ---- facts computed from the fields ----

    @property
    def outputs(self):
        return (self.out, self.err)

    @property
    def output_open(self):
        """Some output channel has not reached EOF yet."""
        return self.out.open or self.err.open

    @property
    def pid(self):
        """ExecMainPID, or -1 before systemd reports it."""
        return self.unit.pid if self.unit.pid is not None else -1

    @property
    def logname(self):
        """Name used in log records: label, else argv[0]'s basename, else the unit."""
        return self.cmd.label or os.path.basename(self.cmd.cmdline[0]) or self.unit.name

    @property
    def keeps_record(self):
        """A started waitable process: its stopped-but-loaded unit holds the status
        until a wait collects it, so a restarted sdexec can still find it."""
        return self.cmd.waitable and self.started_response_sent

    @property
    def visible(self):
        """Listed and found by pid or label (an answered one only waits out its grace, a
        releasing one is only being let go)."""
        return self.state not in (ProcState.ANSWERED, ProcState.RELEASING, ProcState.DONE)

    @property
    def label_free(self):
        """A wait has given its status already: its label goes to a new exec (waits.py)."""
        if self.state is ProcState.ZOMBIE:
            return self.revived
        return self.state in (ProcState.ANSWERED, ProcState.RELEASING, ProcState.DONE)

    @property
    def finished(self):
        """``sdexec.list`` shows it as Z: its exit status is known, or it is a zombie."""
        return self.unit.code is not None or self.state is ProcState.ZOMBIE

    @property
    def owes_exec_response(self):
        """The exec request still waits for a (terminal) response."""
        if self.state in (
            ProcState.DONE,
            ProcState.ZOMBIE,
            ProcState.ANSWERED,
            ProcState.RELEASING,
        ):
            return False
        return not self.cmd.background or not self.started_response_sent
