"""Waitable processes: a parked wait, the zombie kept for it, collecting its status.

Handlers and steps of table.py's rows for ``sdexec.wait`` (see lifecycle.py for
the calling convention). A wait is answered only once the output read so far is
in (DrainOutput, then OutputDrained), so the retained tail is complete. Pure:
stdlib only.
"""

from flux_sdexec.events import AnswerWait, DrainOutput
from flux_sdexec.states import ProcState

S = ProcState


def output_drained(p, event, out):
    if p.waiter is None:
        return p.state
    return collect(p, out, drained=True)


def wait_requested(p, event, out):
    p.waiter = event.waiter
    if p.state is S.ZOMBIE:
        return collect(p, out)
    return p.state


def waiter_gone(p, event, out):
    p.waiter = None
    return p.state


def retain_or_drop(p, out):
    if not p.cmd.waitable:
        return S.DONE
    if p.waiter is not None:
        return collect(p, out)
    return S.ZOMBIE


def collect(p, out, drained=False):
    """Answer the waiter with the status (or stored error) once the output read so far is
    in, then let the unit go."""
    if not drained and p.output_open:
        out.append(DrainOutput())
        return S.ZOMBIE
    waiter, p.waiter = p.waiter, None
    if p.error is not None:
        out.append(AnswerWait(waiter, error=p.error))
    else:
        out.append(AnswerWait(waiter, p.unit.wait_status, tuple(p.retained_output.items)))
    out += p.forget()
    return S.DONE if p.unit.gone else S.RELEASING
