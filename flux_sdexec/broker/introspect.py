"""What ``sdexec.stats-get`` and ``sdexec.units`` answer: one sdexec seen from outside.

``flux sdexec status`` reads the stats of every rank (the service puts them together from
the parts, ``procs_stats`` here), ``flux sdexec units`` the units (``UnitListings``). The
one systemd call, ListUnitsByPatterns for the untracked units (``all``), goes without
waiting on the module's bus, with the per-call deadline of every call there: the request is
answered from its reply, so a stalled systemd delays that answer only, never the reactor
(output, other answers, stop timers)."""

import errno
import itertools

from flux_sdexec.broker.parked import ParkedRequests
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


def procs_stats(registry):
    """flux-core's ``procs`` of ``sdexec.stats-get``: each unit's state, pid and channels."""
    return {
        p.unit.name: {
            "state": p.unit.state,
            "pid": p.pid,
            **{
                key: c.io.stats() if c.io else None
                for key, c in zip(("in", "out", "err"), (p.in_, p.out, p.err))
            },
        }
        for p in registry
    }


def proc_entry(p, job_seen):
    """One tracked process of ``sdexec.units`` (``job_seen``: what the last query of its
    job said, OrphanWatch.job_seen)."""
    return {
        "unit": p.unit.name,
        "label": p.cmd.label,
        "state": p.state.value,
        "unit_state": p.unit.state,
        "pid": p.pid,
        "started": p.unit.started_at,
        "background": p.cmd.background,
        "adopted": p.exec_request is None,
        "orphan": p.orphan,
        "job": job_seen if orphans.suspect(p) else None,  # only while nobody waits on it
    }


class UnitListings:
    """``sdexec.units`` requests, those with ``all`` answered from their listing's reply.

    Args:
        rank: this broker's rank.
        registry: the ``Registry`` of SdProcs.
        namer: the ``naming.UnitNamer`` (this rank's unit names).
        job_seen: ``job_seen(unit)``, OrphanWatch's last word on a suspect's job.
        bridge, bus, calls: the listing's call, its deadline timer, its deadline.
        responder: a ``messages.Responder``.
    """

    def __init__(self, rank, registry, namer, job_seen, bridge, bus, calls, responder):
        self._rank, self._registry, self._namer, self._job_seen = rank, registry, namer, job_seen
        self._bridge, self._bus, self._calls, self._responder = bridge, bus, calls, responder
        self._out = ParkedRequests(responder.respond_error)  # by listing number
        self._numbers = itertools.count()

    def units(self, listed=None):
        """``sdexec.units``: the tracked processes; given ``listed`` (the instance's units
        systemd holds, as (name, ActiveState, SubState)), also this rank's among them that
        sdexec does not track (leftovers)."""
        procs = [proc_entry(p, self._job_seen(p.unit.name)) for p in self._registry]
        answer = {"rank": self._rank, "procs": procs}
        if listed is not None:
            answer["untracked"] = []
            for unit, active, sub in listed:
                ours, label = self._namer.parse(unit)
                if ours and self._registry.by_unit(unit) is None:
                    entry = {"unit": unit, "label": label, "unit_state": f"{active}.{sub}"}
                    answer["untracked"].append(entry)
        return answer

    def answer(self, msg, untracked):
        """Answer ``msg``: at once without ``untracked``, else once the listing replies.
        Raises UnitError when the listing cannot be sent (the caller answers that)."""
        if not untracked:
            self._responder.respond(msg, self.units())
            return
        number, deadline = next(self._numbers), self._calls.deadline()

        def on_reply(exc, listed=None):
            if self._out.take(number) is None:
                return  # answered at unload
            if exc is None:
                self._responder.respond(msg, self.units(listed))
                return
            why = f"systemd did not answer within {deadline:g}s"
            why = why if exc.errno == errno.ETIMEDOUT else (exc.strerror or str(exc))
            self._responder.respond_error(msg, exc.errno, f"{LISTING}: {why}")

        self._bridge.list_units([self._namer.glob], on_reply=on_reply, timeout=deadline)
        self._out.park(number, msg)
        self._bus.sent()  # arms the deadline timer of the calls in flight

    def cancel_all(self, errnum, text):
        """Answer every listing still out with ``errnum`` (unload: the connection closes
        with its calls unanswered)."""
        self._out.cancel_all(errnum, text)
