"""Applying the table: ``handle(sdproc, input) -> actions``.

Look up, then apply, h11-style: the input's row must exist in the process's
state; its handler works on a draft, and the draft is committed only if the
state it returns is one the row allows. Then the unit phases (table.py) are
checked in order, each at most once. An input the table refuses changes
nothing and fails the process: it answers what is owed once and lets the unit
go. The stop-timer rule lives here, in one place, and so do the usage rule (for a
process with a slice of its own: find where the slices are once it runs, read its usage
once its exit is known, stop its slice once it is done) and the reap. Pure: stdlib only.
"""

import errno
import syslog

from flux_sdexec.core.events import (
    AnswerWait,
    CancelTimer,
    CloseChannels,
    FindSlices,
    Log,
    OutputChunk,
    ReadUsage,
    Reap,
    RespondError,
    StopSlice,
    UnitChanged,
)
from flux_sdexec.core.states import ESCALATING, ExecAnswer, Phase, ProcState, StopStage
from flux_sdexec.core.table import TABLE

S = ProcState
_NOT_FINISHED = frozenset({ExecAnswer.NONE, ExecAnswer.STARTED})


def _over(p):
    u = p.unit
    if p.leaves_record:
        return False
    if u.state == "active.exited":
        return not p.calls.stop_sent
    return u.active_state == "failed" and not p.calls.reset_sent


# when each unit phase is due: its facts are known and not yet acted on. Checked one at a
# time, in this order, so that each sees what the phases before it did.
DUE = {
    Phase.POST_START_CHECK: lambda p: bool(p.unit.pid)
    and p.calls.post_start_check is not None
    and not p.calls.check_sent,
    Phase.STARTED: lambda p: p.unit.started and p.calls.post_start_check is None,
    Phase.EXITED: lambda p: p.unit.finished and p.answers.exec in _NOT_FINISHED,
    Phase.EXEC_FAILED: lambda p: p.unit.exec_failed and p.error is None,
    Phase.OVER: _over,
    Phase.DEACTIVATING: lambda p: p.unit.stopping
    and p.stop.stage is StopStage.IDLE
    and p.cmd.stop_timer_sec is not None,
    Phase.GONE: lambda p: p.unit.gone,
    Phase.RELEASE_CHECK: lambda p: True,
}


# the phase rows of each state (the same rows as TABLE's, looked up per state once)
PHASE_ROWS = {s: {ph: TABLE[(s, ph)] for ph in Phase if (s, ph) in TABLE} for s in ProcState}


def handle(p, event):
    """Apply one input to SdProc ``p``; return the actions to carry out, in order.

    Nothing follows DONE: an input for a DONE process returns no action.
    """
    if p.state is S.DONE:
        return []
    row = TABLE.get((p.state, type(event)))
    if row is None:
        return fail(p, type(event).__name__)
    unit = None
    if type(event) is UnitChanged:
        unit = p.unit.copy()
        if not unit.update(event.props, event.reread):
            return []
    d = p.draft(unit)
    actions = []
    if not _step(d, row, event, actions):
        return fail(p, type(event).__name__)
    if type(event) is not OutputChunk:  # output changes no unit fact
        for phase, due in DUE.items():
            prow = PHASE_ROWS[d.state].get(phase)
            if prow is not None and due(d) and not _step(d, prow, event, actions):
                return fail(p, f"{type(event).__name__} ({phase.name})")
    before = p.state
    if p.accounted:
        _usage_rule(p.unit, d.unit, actions)
    p.commit(d)
    _stop_timer_rule(p, actions)
    if p.state is S.DONE and before is not S.DONE:
        _reap(p, actions)
    return actions


def _reap(p, actions):
    """The process is done: its slice stopped, if it has one, then the reap."""
    if p.accounted:
        actions.append(StopSlice())
    actions.append(Reap())


def _usage_rule(before, after, actions):
    """A process with a slice of its own: its unit's process seen running, find where the
    slices are; its exit known, read its usage first, before the answers the exit brought."""
    if _runs(after) and not _runs(before):
        actions.append(FindSlices())
    if after.finished and not before.finished:
        actions.insert(0, ReadUsage())


def _runs(unit):
    return bool(unit.pid) and not unit.finished


def _step(d, row, event, actions):
    targets, handler = row
    state = handler(d, event, actions)
    if state not in targets:
        return False
    d.state = state
    return True


def _stop_timer_rule(p, actions):
    """The stop timer runs only while the unit deactivates in an ESCALATING state."""
    if p.stop.stage is StopStage.IDLE:
        return
    if p.state not in ESCALATING or not p.unit.stopping:
        p.stop.stage = StopStage.IDLE
        actions.append(CancelTimer())


def fail(p, what):
    """Fail the process for an input its state does not allow, or that a handler could not
    apply (a bug, never the client's): answer what is owed once, let the unit go."""
    text = f"internal error: {what} in state {p.state.name}"
    actions = [Log(syslog.LOG_ERR, f"{p.unit.name}: {text}")]
    if p.owes_exec_response:
        actions.append(RespondError(errno.EINVAL, text))
    if p.wait.waiter is not None:
        actions.append(AnswerWait(p.wait.waiter, error=(errno.EINVAL, text)))
        p.wait.waiter = None
    p.error = (errno.EINVAL, text)
    actions.append(CloseChannels())
    actions += p.forget()
    released = p.state is S.RELEASING or p.unit.gone
    p.state = S.DONE if released else S.RELEASING
    _stop_timer_rule(p, actions)
    if p.state is S.DONE:
        _reap(p, actions)
    return actions
