"""The transition table: (state, input or unit phase) -> (states it may lead to, handler).

Everything that decides which step of a process's life happens when lives here, as
data; lifecycle.py says what each step does and machine.py applies them. An input
with no row in the process's state is refused (machine.py fails the process); a unit
phase with no row means nothing in that state. The theory of operation, from the
design and flux-core's sdexec.c:

- started: a client learns the pid from "started". It goes out once the process
  runs, or once its exit status is known (systemd coalesces quick transitions, so a
  short process may never be seen running), so a command that cannot be executed
  gets only its ENOENT, never a "started" first.
- finished: the unit runs with RemainAfterExit, so its main process's exit leaves
  it active/exited with ExecMainCode/ExecMainStatus set: that is the wait status.
- stop: the active/exited unit still holds the stdio sockets it was given; StopUnit
  makes systemd let go of them, and only then do our channels see EOF.
- reset-failed: a unit whose process failed (non-zero exit, signal, exec failure)
  stays loaded as failed until ResetFailedUnit; reset it so nothing is left behind.
  A waitable background unit is the exception: it stays loaded, as the record of the
  status, until a wait collects it, and a short grace after that (waits.py).
- EOF/ENODATA order: ENODATA closes the exec stream, so it goes out only when the
  unit is gone (inactive again) and every output channel has reached EOF: nothing
  can follow it.
- stop timer: armed when the unit enters deactivating, it escalates SIGTERM, the
  configured signal, then EDEADLK; machine.py cancels it whenever the unit leaves
  deactivating or the process leaves the states where it may run (ESCALATING).

``markdown()`` renders the rows as doc/dev/design.md shows them (``make doc-table``).
Pure: stdlib only.
"""

from flux_sdexec.core import lifecycle, orphans, waits
from flux_sdexec.core.events import (
    AnswerMaybeLost,
    ContainmentChecked,
    ClientGone,
    GraceExpired,
    JobGone,
    OutputChunk,
    OutputClosed,
    OutputDrained,
    StartFailed,
    StopTimerExpired,
    UnitChanged,
    UnitLost,
    Unloading,
    WaitRequested,
    WaiterGone,
    ClaimsStart,
    LabelReused,
)
from flux_sdexec.core.states import ESCALATING, LIVE, Phase, ProcState

S = ProcState
STARTING, RUNNING, FINISHED, FAILED = S.STARTING, S.RUNNING, S.FINISHED, S.FAILED
ZOMBIE, ANSWERED, RELEASING, DONE = S.ZOMBIE, S.ANSWERED, S.RELEASING, S.DONE
# where a process whose unit is over may end up, depending on its flags
ENDS = {DONE, ZOMBIE, ANSWERED, RELEASING}

TABLE = {}
ROWS = []  # each row() below as written: (states, key, targets, handler)


def row(states, key, targets, handler):
    """Add the rows (state, key) for each of ``states``; a target of None means "stay"."""
    ROWS.append((tuple(states), key, tuple(targets), handler))
    for state in states:
        TABLE[(state, key)] = (frozenset(state if t is None else t for t in targets), handler)


# ---- unit phases (state-triggered) ----
# the AllowedCPUs check (debug mode) runs before "started" may go out: a failed check is
# an EIO without "started", as in flux-core
row([STARTING], Phase.POST_START_CHECK, [None], lifecycle.post_start_check)
# started: see the module docstring; an adopted unit's "started" went out long ago
row([STARTING], Phase.STARTED, [RUNNING], lifecycle.started)
# finished: foreground answers it, background logs it; a waitable one becomes a zombie
# (or answers its parked wait)
row([RUNNING], Phase.EXITED, [FINISHED, *ENDS], lifecycle.exited)
# exec failure (systemd exit 200-243): stored as ENOENT, answered when the unit is gone
row(
    [STARTING, RUNNING],
    Phase.EXEC_FAILED,
    [FAILED, ZOMBIE, ANSWERED, RELEASING],
    lifecycle.exec_failed,
)
# stop / reset-failed, unless the unit is kept as a waitable's record
row(ESCALATING, Phase.OVER, [None], lifecycle.over)
# the stop timer starts when systemd starts stopping the unit
row(ESCALATING, Phase.DEACTIVATING, [None], lifecycle.deactivating)
# EOF/ENODATA order: the terminal response waits for the unit to be gone and the EOFs
row(ESCALATING, Phase.GONE, [None, *ENDS], lifecycle.gone)
# a released unit is watched until systemd has forgotten it
row([RELEASING], Phase.RELEASE_CHECK, [RELEASING, DONE], lifecycle.release_check)

# ---- inputs (event-triggered) ----
# what systemd says is recorded in every state; the phases above decide what it means
row(LIVE, UnitChanged, [None], lifecycle.same)
# systemd refused the start: answer the error, nothing of the unit is ours to let go
row(ESCALATING, StartFailed, [DONE], lifecycle.start_failed)
# background output is logged (and retained for a wait) until the channels close
row(LIVE, OutputChunk, [None], lifecycle.output_chunk)
row(LIVE, OutputClosed, [None], lifecycle.output_closed)
# a wait asked for the output written so far: answer it now
row([ZOMBIE], OutputDrained, [ZOMBIE, ANSWERED, RELEASING, DONE], waits.output_drained)
# the answer to CheckContainment; a process that failed meanwhile ignores it
row([STARTING], ContainmentChecked, [STARTING, FAILED], lifecycle.post_start_checked)
row([FAILED], ContainmentChecked, [FAILED], lifecycle.post_start_checked)
# escalation steps; a zombie or releasing process has no timer, but an expiry may have
# been queued before the cancel
row(ESCALATING, StopTimerExpired, [None, *ENDS], lifecycle.stop_timer_expired)
row([ZOMBIE, ANSWERED, RELEASING], StopTimerExpired, [None], lifecycle.same)
# a gone client's foreground unit is SIGKILLed; background units live on
row(LIVE, ClientGone, [None], lifecycle.client_gone)
# a wait parks until the process is over, or collects a zombie's status
row(ESCALATING, WaitRequested, [None], waits.wait_requested)
row([ZOMBIE], WaitRequested, [ZOMBIE, ANSWERED, RELEASING, DONE], waits.wait_requested)
row([*ESCALATING, ZOMBIE], WaiterGone, [None], waits.waiter_gone)
# the answer grace (waits.py): the client of an answered parked wait left soon after, so
# the answer may be lost: the record is a zombie again; a grace (or a revived record's
# hold) that ends lets the unit go
row([ANSWERED], AnswerMaybeLost, [ZOMBIE, RELEASING, DONE], waits.answer_maybe_lost)
row(LIVE, GraceExpired, [None, RELEASING, DONE], waits.grace_expired)
# the manager restarted without a running unit (catchup.py): its exec ends with an error
row(ESCALATING, UnitLost, [None], lifecycle.unit_lost)
# a job shell whose job is over is stopped (orphans.py); its record, if over, let go
row(ESCALATING, JobGone, [None], orphans.job_gone)
row([ZOMBIE], JobGone, [ZOMBIE, RELEASING, DONE], orphans.job_gone)
row([ANSWERED], JobGone, [ANSWERED, RELEASING, DONE], orphans.job_gone)
row([RELEASING], JobGone, [None], lifecycle.same)
# a new exec takes the label of a record whose status was given: it goes at once
row(LIVE, LabelReused, [None, RELEASING, DONE], waits.label_reused)
# an adopted record's hold counts from the first wait since load (waits.py)
row(LIVE, ClaimsStart, [None], waits.claims_start)
# unload answers what is owed (ENOSYS) and lets the unit go
row(LIVE, Unloading, [DONE], lifecycle.unloading)


def _state_names(states):
    """``states`` in ProcState order, as their names; every live state as one phrase."""
    if set(states) == LIVE:
        return "every state but DONE"
    return ", ".join(s.name for s in ProcState if s in states)


def markdown():
    """The unit phases and the rows above as two Markdown tables, in the order written."""
    lines = ["| unit phase | due when |", "|---|---|"]
    lines += [f"| `{phase.name}` | {phase.value} |" for phase in Phase]
    lines += ["", "| in | on | may lead to | handler |", "|---|---|---|---|"]
    for states, key, targets, handler in ROWS:
        on = f"phase `{key.name}`" if isinstance(key, Phase) else f"`{key.__name__}`"
        stays = ["same state"] if None in targets else []
        to = ", ".join(stays + [s.name for s in ProcState if s in targets])
        name = f"{handler.__module__.rsplit('.', 1)[-1]}.{handler.__name__}"
        lines.append(f"| {_state_names(states)} | {on} | {to} | `{name}` |")
    return "\n".join(lines) + "\n"
