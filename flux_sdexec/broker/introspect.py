"""What ``sdexec.stats-get`` and ``sdexec.units`` answer: one SdexecService seen from outside.

``flux sdexec status`` reads the stats of every rank, ``flux sdexec units`` the units.
Only reads the service. The one systemd call, ListUnitsByPatterns for the untracked units
(``all``), goes without waiting on the module's bus (``UnitListings``), with the per-call
deadline of every call there: the request is answered from its reply, so a stalled systemd
delays that answer only, never the reactor (output, other answers, stop timers).
"""

import errno
import itertools

from flux_sdexec import __version__

from flux_sdexec.core import orphans
from flux_sdexec.core.states import ProcState

LISTING = "listing this rank's units"

# where systemd is reached: bridge.via is the private socket's path, or the bus's name
PRIVATE, BUS = "private", "bus"


def systemd_link(via):
    """``{"kind": "private" or "bus", "via": what the bridge connected to}``."""
    kind = PRIVATE if via and via.startswith("/") else BUS
    return {"kind": kind, "via": via}


def tracked_counts(procs):
    """How many of ``procs`` (SdProcs) are in each state but DONE: ``{state: n}``."""
    counts = {s.value: 0 for s in ProcState if s is not ProcState.DONE}
    for p in procs:
        if p.state.value in counts:
            counts[p.state.value] += 1
    return counts


def stats(svc):
    """``sdexec.stats-get``: flux-core's per-unit ``procs`` plus our module's own facts."""
    procs = {}
    for p in svc.registry:
        procs[p.unit.name] = {
            "state": p.unit.state,
            "pid": p.pid,
            **{
                key: c.io.stats() if c.io else None
                for key, c in zip(("in", "out", "err"), (p.in_, p.out, p.err))
            },
        }
    return {
        "procs": procs,
        "version": __version__,
        "module": svc.module_file,
        "systemd": systemd_link(svc.bridge.via),
        "reconnects": svc.bus.reconnects,
        "signals": svc.bridge.signals.stats(),
        "tracked": tracked_counts(svc.registry),
        "adopted": svc.adopted,
        "containment": svc.containment.stats(),
        "systemd-timeout": svc.calls.budget,
        "sweeping": svc.sweeper.units(),
        "orphan-checks": svc.orphans.checks,
        "orphans-stopped": svc.orphans.stopped,
    }


def proc_entry(p):
    """One tracked process of ``sdexec.units``."""
    return {
        "unit": p.unit.name,
        "label": p.cmd.label,
        "state": p.state.value,
        "unit_state": p.unit.state,
        "pid": p.pid,
        "started": p.started_at,
        "background": p.cmd.background,
        "adopted": p.exec_request is None,
        "orphan": p.orphan,
        "job": p.job_seen if orphans.suspect(p) else None,  # only while nobody waits on it
    }


def units(svc, listed=None):
    """``sdexec.units``: the tracked processes; given ``listed`` (the instance's units
    systemd holds, as (name, ActiveState, SubState)), also this rank's among them that
    sdexec does not track (leftovers)."""
    answer = {"rank": svc.rank, "procs": [proc_entry(p) for p in svc.registry]}
    if listed is not None:
        answer["untracked"] = []
        for unit, active, sub in listed:
            ours, label = svc.namer.parse(unit)
            if ours and svc.registry.by_unit(unit) is None:
                entry = {"unit": unit, "label": label, "unit_state": f"{active}.{sub}"}
                answer["untracked"].append(entry)
    return answer


class UnitListings:
    """``sdexec.units`` requests, those with ``all`` answered from their listing's reply.

    Args:
        svc: the SdexecService (rank, registry, namer, bridge, bus, calls, responder).
    """

    def __init__(self, svc):
        self.svc = svc
        self._out = {}  # listing number -> request, until answered
        self._numbers = itertools.count()

    def answer(self, msg, untracked):
        """Answer ``msg``: at once without ``untracked``, else once the listing replies.
        Raises UnitError when the listing cannot be sent (the caller answers that)."""
        svc = self.svc
        if not untracked:
            svc.responder.respond(msg, units(svc))
            return
        number, deadline = next(self._numbers), svc.calls.deadline

        def on_reply(exc, listed=None):
            if self._out.pop(number, None) is None:
                return  # answered at unload
            if exc is None:
                svc.responder.respond(msg, units(svc, listed))
                return
            why = f"systemd did not answer within {deadline:g}s"
            why = why if exc.errno == errno.ETIMEDOUT else (exc.strerror or str(exc))
            svc.responder.respond_error(msg, exc.errno, f"{LISTING}: {why}")

        svc.bridge.list_units([svc.namer.glob], on_reply=on_reply, timeout=deadline)
        self._out[number] = msg
        svc.bus.sent()  # arms the deadline timer of the calls in flight

    def close(self, errnum, text):
        """Answer every listing still out with ``errnum`` (unload: the connection closes
        with its calls unanswered)."""
        out, self._out = self._out, {}
        for msg in out.values():
            self.svc.responder.respond_error(msg, errnum, text)
