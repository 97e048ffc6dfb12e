"""Inputs to and actions from the per-process state machine (machine.py).

Inputs are facts, named as nouns or in the past tense; actions are orders,
named in the imperative. Only adapters carry actions out, and they feed back
what an order asks to hear (``DrainOutput`` -> ``OutputDrained``,
``CheckContainment`` -> ``ContainmentChecked``). Pure: stdlib only.
"""

from dataclasses import dataclass, field

# ---- inputs ----


@dataclass(frozen=True)
class StartFailed:
    """systemd refused StartTransientUnit (or did not answer it): the unit never started."""

    errnum: int
    text: str


@dataclass(frozen=True)
class UnitChanged:
    """systemd sent PropertiesChanged for the unit; or, ``reread``, the unit was read
    (GetAll) after signals may have been lost (unitstate.Unit.update)."""

    props: dict
    reread: bool = False


@dataclass(frozen=True)
class OutputChunk:
    """A background process wrote ``data`` on ``stream`` (logged, and retained if waitable)."""

    stream: str
    rank: str
    data: bytes
    eof: bool = False


@dataclass(frozen=True)
class OutputClosed:
    """An output channel (``stdout`` or ``stderr``) reached EOF."""

    stream: str


@dataclass(frozen=True)
class OutputDrained:
    """Everything already written to the output channels was read (after DrainOutput)."""


@dataclass(frozen=True)
class ContainmentChecked:
    """The answer to CheckContainment: None when the exec may run, else the problem."""

    problem: str = None


@dataclass(frozen=True)
class StopTimerExpired:
    """The stop timer armed by ArmTimer ran out."""


@dataclass(frozen=True)
class ClientGone:
    """The client that sent the exec request disconnected."""


@dataclass(frozen=True)
class WaitRequested:
    """An ``sdexec.wait`` names this process; ``waiter`` is the adapter's request."""

    waiter: object


@dataclass(frozen=True)
class WaiterGone:
    """The client of the parked wait disconnected."""


@dataclass(frozen=True)
class ClaimsStart:
    """A client that collects records is there: the first ``sdexec.wait`` since load
    reached this sdexec, or ``flux sdexec upgrade`` announced job-exec's load. Fed to
    adopted processes; ``why`` says which, for the log."""

    why: str


@dataclass(frozen=True)
class LabelReused:
    """A new exec asks for this record's label, whose status a wait has already given:
    the label is free at once (as in the C module), so the record goes now."""


@dataclass(frozen=True)
class AnswerMaybeLost:
    """The client whose wait was just answered disconnected within the grace: the answer
    may never have been read (a module unloading as it came). ``label_taken``: another
    visible process has this one's label by now."""

    label_taken: bool = False


@dataclass(frozen=True)
class GraceExpired:
    """The grace timer armed by ArmGrace ran out."""


@dataclass(frozen=True)
class Unloading:
    """The module is unloading: answer what is owed, then stop the unit, or with
    ``hand_over`` leave it running for the next sdexec to adopt (see handoff.py). A kept unit's
    parked wait is let go unanswered when not ``answer_wait``: at a shutdown the running
    jobs outlive, its waiter (job-exec) goes with the same shutdown, and an answer, an
    error, would end the job the restarted instance reattaches to."""

    hand_over: bool = False
    answer_wait: bool = True


@dataclass(frozen=True)
class JobGone:
    """The job of this job shell is inactive or unknown to the instance (orphans.py)."""

    reason: str


@dataclass(frozen=True)
class UnitLost:
    """The manager restarted without this running unit (broker/catchup.py): the exec ends
    with ``text`` as its error (ECONNRESET), not with a status."""

    text: str


# ---- actions ----


@dataclass(frozen=True)
class Respond:
    """Send a non-error response to the exec request."""

    payload: dict


@dataclass(frozen=True)
class RespondError:
    """Send an error response to the exec request."""

    errnum: int
    text: str = None


@dataclass(frozen=True)
class AnswerWait:
    """Answer ``waiter`` with the exit status and retained output, or with ``error``."""

    waiter: object
    status: int = None
    output: tuple = ()
    error: tuple = None  # (errno, text)


@dataclass(frozen=True)
class CheckContainment:
    """Verify ``check`` (an ``enforcement.PostStartCheck``) against the cgroup of ``pid``;
    answer ContainmentChecked."""

    pid: int
    check: object


@dataclass(frozen=True)
class StartOutput:
    """Start reading the output channels."""


@dataclass(frozen=True)
class DrainOutput:
    """Read what the output channels hold now, then feed OutputDrained."""


@dataclass(frozen=True)
class StopUnit:
    """StopUnit(unit, "replace"): cancels a start job still queued."""


@dataclass(frozen=True)
class ResetFailedUnit:
    """ResetFailedUnit(unit), so systemd forgets a failed unit."""


@dataclass(frozen=True)
class KillUnit:
    """KillUnit(unit, "main", signum)."""

    signum: int


@dataclass(frozen=True)
class ArmTimer:
    """(Re)arm the stop timer for ``seconds``."""

    seconds: float


@dataclass(frozen=True)
class ArmGrace:
    """(Re)arm the process's grace timer (waits.py) for ``seconds``; it feeds GraceExpired."""

    seconds: float


@dataclass(frozen=True)
class WatchJob:
    """Ask the instance, from time to time, whether this job shell's job is over (the
    orphan watch): a kept record's JobGone lets it go (waits.py)."""


@dataclass(frozen=True)
class CancelTimer:
    """Stop the stop timer."""


@dataclass(frozen=True)
class Log:
    """Write ``text`` to the broker log at syslog ``level``."""

    level: int
    text: str = field(default="")


@dataclass(frozen=True)
class CloseChannels:
    """Stop reading output and close stdio: the client has had its last response."""


@dataclass(frozen=True)
class DrainRank:
    """Drain this broker's rank (resource.drain) with ``reason``: its IMP failed."""

    reason: str


@dataclass(frozen=True)
class FindSlices:
    """The process has a pid and runs: learn from its cgroup where the accounting slices are."""


@dataclass(frozen=True)
class ReadUsage:
    """The process's exit is known: read what it used, before any answer goes out."""


@dataclass(frozen=True)
class StopSlice:
    """The process is done: stop its accounting slice, unless its unit stays loaded."""


@dataclass(frozen=True)
class Reap:
    """Release the unit watch, timers and fds; the process is over."""
