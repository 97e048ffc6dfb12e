"""What ``sdexec.stats-get`` and ``sdexec.units`` answer: one SdexecService seen from outside.

``flux sdexec status`` reads the stats of every rank, ``flux sdexec units`` the units.
Only reads the service; the one systemd call (ListUnitsByPatterns, for untracked
units) is a rare, blocking one.
"""

from flux_sdexec import __version__, orphans
from flux_sdexec.states import ProcState

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


def units(svc, untracked):
    """``sdexec.units``: the tracked processes; with ``untracked``, also this rank's units
    of the instance that systemd holds and sdexec does not track (leftovers)."""
    answer = {"rank": svc.rank, "procs": [proc_entry(p) for p in svc.registry]}
    if untracked:
        answer["untracked"] = []
        for unit, active, sub in svc.bridge.list_units([svc.namer.glob]):
            ours, label = svc.namer.parse(unit)
            if ours and svc.registry.by_unit(unit) is None:
                entry = {"unit": unit, "label": label, "unit_state": f"{active}.{sub}"}
                answer["untracked"].append(entry)
    return answer
