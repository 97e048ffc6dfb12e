"""The verdict's rules for node faults: which job endings and which drains a fault explains.

Pure: reads job records (see verdict.py; on the nodes a record also has ``stamps``, the time of
each event, and ``ranks``, the broker ranks the job ran on) and the run's ``fault_log`` (each
fault injected: ``kind``, ``rank``, wall-clock ``start`` and ``end``).

A job that did not end with its own exit code is **ended by a node fault** when it became
inactive (a job still active at the end is a hang: never explained), it has an exception, and
each of its exceptions names a node (its hostname as a word, e.g. ``node failure on node2
(rank 2)``, or ``job shell exec error on broker node1 (rank 1): the systemd manager restarted
without ...``, sdexec's answer for a unit the new manager does not have) whose broker or
manager was killed (``brokerkill``, ``managerkill``) while the job held that node: the job ran
on that rank, and the exception came between the fault's start and FAULT_WINDOW seconds after
its end. A job that ended with a wrong exit code and no exception, or an exception naming
another node, long after the fault, or after any other kind of fault, is lost.
"""

import re

from .schedule import NODE_KINDS

# seconds after a node fault ended (its broker or manager answering again) in which the jobs
# it hit may still be raised: sdexec ends a lost manager's jobs once it has reconnected
FAULT_WINDOW = 60.0
# seconds before a drain in which a fault on its rank explains it
DRAIN_WINDOW = 60.0


def names_node(note, hostname):
    """``hostname`` appears in ``note`` as a word (``node1`` is not in ``on node12``)."""
    return re.search(rf"(?<![\w-]){re.escape(hostname)}(?![\w-])", note or "") is not None


def _exceptions(job):
    stamps = job.get("stamps") or [None] * len(job.get("events", []))
    return [
        (context, stamp)
        for (name, context), stamp in zip(job.get("events", []), stamps)
        if name == "exception"
    ]


def explaining_fault(job, fault_log, hostnames, window=FAULT_WINDOW):
    """The node fault that ended ``job``, as a short sentence, or None (the job is lost).

    Args:
        job: a job record (see the module docstring).
        fault_log: the faults injected, in order.
        hostnames: ``{rank: hostname}``.
    """
    if not any(name == "clean" for name, _ in job.get("events", [])):
        return None
    exceptions = _exceptions(job)
    ranks = set(job.get("ranks") or [])
    if not exceptions:
        return None
    found = []
    for context, stamp in exceptions:
        fault = _fault_for(context.get("note", ""), stamp, ranks, fault_log, hostnames, window)
        if fault is None:
            return None
        found.append(fault)
    first = found[0]
    host = hostnames.get(first["rank"], f"rank {first['rank']}")
    return f"{first['kind']} of {host} at {first['start']:.1f}"


def _fault_for(note, stamp, ranks, fault_log, hostnames, window):
    if stamp is None:
        return None
    for fault in reversed(fault_log):  # the latest that fits
        if (
            fault["kind"] in NODE_KINDS
            and fault["rank"] in ranks
            and fault["start"] <= stamp <= fault["end"] + window
            and names_node(note, hostnames.get(fault["rank"], ""))
        ):
            return fault
    return None


def unexplained_drains(drains, fault_log, window=DRAIN_WINDOW):
    """The drains no fault explains: none on any of its ranks began within ``window`` s before
    it (up to its time). ``drains``: ``[{"ranks": [..], "timestamp": t, "reason": text}]``."""
    left = []
    for drain in drains:
        t = drain.get("timestamp", 0)
        hit = any(
            f["rank"] in drain.get("ranks", []) and t - window <= f["start"] <= t for f in fault_log
        )
        if not hit:
            left.append(drain)
    return left


def expand_idset(text):
    """The integers of an idset such as ``0-2,5`` (flux's ranks notation)."""
    ids = []
    for part in (text or "").split(","):
        if not part.strip():
            continue
        lo, _, hi = part.partition("-")
        ids += list(range(int(lo), int(hi or lo) + 1))
    return ids
