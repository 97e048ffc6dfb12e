"""SdProc: one exec request's process, after the design's ``struct sdproc``.

The design's seven items, each one field: the request message (``exec_request``), the
command (``cmd``), the start and stop calls (``calls``: which were made, not the futures,
which the adapters keep), the unit (``unit``), the three channels (``in_``, ``out``,
``err``), the stop-timer state (``stop``) and the response-sent flags (``answers``).
Five more the design's list does not name: where the process is (``state``, table.py),
the error its terminal response carries (``error``), the sdexec.wait sub-state
(``wait``, waits.py), whether it was adopted at load (``adopted``) and why it is stopped
as an orphan (``orphan``, orphans.py). Flags that change together are one typed
sub-record (``SentCalls``, ``Answers``, ``Wait``; each says who writes it) or one small enum
(states.py's ``ExecAnswer``, ``Hold``), never a bag of booleans.

It does not mirror the C struct field for field: no futures or watchers, and nothing an
adapter owns (its keeper: keepers.py; its usage and accounting slice: accounting.py; its
job's last query: orphan_watch.py), which each keeps keyed by unit or by process.

Data (plus the facts computed from it and the two orders every step may need:
StartOutput once, and the forget policy's next call). The decisions about it live in
lifecycle.py, the rules for which decision applies in table.py, and machine.py
applies them. The ``io`` slots (and ``Wait.grace``) hold the adapters' objects
(sockets, watchers); the core never looks at them. Pure: stdlib only.
"""

import os

from flux_sdexec.core.impfatal import watch_for
from flux_sdexec.core.retained import RetainedOutput
from flux_sdexec.core.events import ResetFailedUnit, StartOutput, StopUnit
from flux_sdexec.core.states import ExecAnswer, Claim, ProcState, StopStage
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


class SentCalls:
    """The calls made for the process, each at most once: to systemd (start, stop,
    reset-failed, a SIGKILL deferred until the process runs) and the post-start
    containment check. What they answer comes back as inputs.

    Written by the core's handlers (lifecycle.py, ``SdProc.forget``), except
    ``start_sent``: the exec adapter (broker/requests.py) sets it once StartTransientUnit
    is sent, and adoption starts with it set.
    """

    __slots__ = (
        "start_sent",
        "stop_sent",
        "reset_sent",
        "post_start_check",
        "check_sent",
        "kill_when_started",
    )

    def __init__(self, start_sent, post_start_check):
        self.start_sent = start_sent  # StartTransientUnit was called
        self.stop_sent = False  # StopUnit was called
        self.reset_sent = False  # ResetFailedUnit was called
        self.post_start_check = post_start_check  # what to verify once the pid is known
        self.check_sent = False  # CheckContainment was asked for
        self.kill_when_started = False  # a fg client left before its process ran

    def copy(self):
        c = SentCalls.__new__(SentCalls)
        c.start_sent, c.stop_sent, c.reset_sent = self.start_sent, self.stop_sent, self.reset_sent
        c.post_start_check, c.check_sent = self.post_start_check, self.check_sent
        c.kill_when_started = self.kill_when_started
        return c


class Answers:
    """What the exec request has been answered (the design's response-sent flags).

    Written by the core's handlers (lifecycle.py, ``SdProc.start_output``). ``imp_error``
    is one object for the process's life, never copied: the foreground stderr reader
    (broker/output.py) feeds it every chunk it forwards, the core (lifecycle.py) every
    chunk it logs; impfatal.py reads it.
    """

    __slots__ = ("exec", "output_started", "imp_error")

    def __init__(self, adopted, imp_error):
        self.exec = ExecAnswer.STARTED if adopted else ExecAnswer.NONE  # started, finished
        self.output_started = False  # StartOutput was asked for
        self.imp_error = imp_error  # the IMP's fatal line on stderr, if it runs the IMP

    def copy(self):
        c = Answers.__new__(Answers)
        c.exec, c.output_started, c.imp_error = self.exec, self.output_started, self.imp_error
        return c


class Wait:
    """The wait sub-state of a waitable process (waits.py): its waiter, the answer's
    grace, the record's claim window, the output kept for the answer.

    Written by waits.py's handlers (and machine.fail, lifecycle.py's answers of a
    waiter with an error), except ``grace``, the adapter's grace timer
    (broker/actions.py). ``retained`` is one object for the process's life, never
    copied: only OutputChunk rows, which never change the state, add to it.
    """

    __slots__ = (
        "waiter",
        "parked",
        "answered_to",
        "kept",
        "claim",
        "before_first_wait",
        "grace",
        "retained",
    )

    def __init__(self, adopted, waitable):
        self.waiter = None  # the sdexec.wait request waiting for the status
        self.parked = False  # it came while the process ran (the answer grace follows)
        self.answered_to = None  # the wait request last answered, during its grace
        self.kept = False  # answered, and kept while its job runs (waits.py)
        self.claim = Claim.NONE  # why a zombie record is kept only a while
        self.before_first_wait = adopted  # no sdexec.wait came since load (the claim window)
        self.grace = None  # the adapter's grace timer (ArmGrace)
        self.retained = RetainedOutput() if waitable else None  # output tail for the answer

    def copy(self):
        c = Wait.__new__(Wait)
        c.waiter, c.parked, c.answered_to = self.waiter, self.parked, self.answered_to
        c.kept = self.kept
        c.claim, c.before_first_wait = self.claim, self.before_first_wait
        c.grace, c.retained = self.grace, self.retained
        return c


class SdProc:
    """One exec: request, command, calls, unit, channels, stop timer, answers.

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
        self.calls = SentCalls(adopted, cmd.post_start_check)  # the calls made for it
        self.unit = Unit(unit)  # what systemd last said about the unit
        streams = set(cmd.streams)
        self.in_ = Channel("stdin", not cmd.background)  # stdin
        self.out = Channel("stdout", "stdout" in streams)  # stdout
        self.err = Channel("stderr", "stderr" in streams)  # stderr
        self.stop = StopTimer()  # kill escalation
        self.answers = Answers(adopted, watch_for(cmd))  # what the exec request was answered
        self.error = None  # (errno, text) for the terminal response
        self.wait = Wait(adopted, cmd.waitable)  # its waiter, grace and claim window (waits.py)
        self.state = ProcState.STARTING  # where the process is (table.py)
        self.orphan = None  # why it is stopped: its job is over (orphans.py)
        # its usage is read at its exit, from its accounting slice or its unit, or its exit
        # may tell where usage is read from (machine.py's usage rule, usage/accounting.py)
        self.accounted = False

    def draft(self, unit=None):
        """A copy that a handler may change; ``commit()`` adopts it if the table allows.

        ``unit``: an already updated copy of the Unit to use. Every sub-record a handler
        may change is copied; the objects they hold (the retained output, the IMP's error
        line, the adapters' io) are shared.
        """
        d = SdProc.__new__(SdProc)
        d.__dict__.update(self.__dict__)
        d.unit = unit or self.unit.copy()
        d.in_, d.out, d.err = self.in_.copy(), self.out.copy(), self.err.copy()
        d.stop = self.stop.copy()
        d.calls, d.answers, d.wait = self.calls.copy(), self.answers.copy(), self.wait.copy()
        return d

    def commit(self, draft):
        self.__dict__.update(draft.__dict__)

    # ---- the two orders every step may need, each given once ----

    def start_output(self):
        """[StartOutput] the first time, then []."""
        if self.answers.output_started:
            return []
        self.answers.output_started = True
        return [StartOutput()]

    def forget(self, final=False):
        """The next call that makes systemd forget the unit, by unitstate's one policy.

        ``final``: nothing will watch the unit after this (unload), so a start job still
        queued must be cancelled now; otherwise its run is watched and then stopped.
        """
        queued = final and not self.unit.left_inactive
        call = forget_call(self.unit.active_state, queued)
        if call == "reset-failed" and not self.calls.reset_sent:
            self.calls.reset_sent = True
            return [ResetFailedUnit()]
        if call == "stop" and not self.calls.stop_sent:
            self.calls.stop_sent = True
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
    def leaves_record(self):
        """A started waitable process: its stopped-but-loaded unit holds the status
        until a wait collects it, so a restarted sdexec can still find it."""
        return self.cmd.waitable and self.answers.exec is not ExecAnswer.NONE

    @property
    def visible(self):
        """Listed and found by pid or label (an answered one only waits out its grace, a
        releasing one is only being let go)."""
        return self.state not in (ProcState.ANSWERED, ProcState.RELEASING, ProcState.DONE)

    @property
    def label_free(self):
        """A wait has given its status already: its label goes to a new exec (waits.py)."""
        if self.state is ProcState.ZOMBIE:
            return self.wait.claim is Claim.REVIVED
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
        return not self.cmd.background or self.answers.exec is ExecAnswer.NONE
