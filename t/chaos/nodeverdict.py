"""The verdict's rules for node faults: which job endings and which drains a fault explains.

Pure: reads job records (see verdict.py; on the nodes a record also has ``stamps``, the time of
each event, and ``ranks``, the broker ranks the job ran on) and the run's ``fault_log`` (each
fault injected: ``kind``, ``rank``, wall-clock ``start`` and ``end``).

A job that did not end with its own exit code is **ended by a node fault** when it became
inactive (a job still active at the end is a hang: never explained) and either

- it has an exception, and each of its exceptions names a node (its hostname as a word, e.g.
  ``node failure on node2 (rank 2)``) whose broker was killed or whose manager was killed
  (``brokerkill``, ``managerkill``) while the job held that node: the job ran on that rank,
  and the exception came between the fault's start and FAULT_WINDOW seconds after its end; or
- it has no exception, its finish status is SIGKILL's (9), and the sdexec of a node whose
  manager was killed ended one of the job's shell units there as lost, in that window: its
  log line ``<unit>: unknown to systemd after the reconnect: ended`` (``lost_units``, from the
  instance's log), the design's answer for a unit the new manager does not have.

A job that ended with a wrong exit code and no such evidence, or an exception naming another
node, long after the fault, or after any other kind of fault, is lost.
"""

import re
from datetime import datetime, timezone

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


def explaining_fault(job, fault_log, hostnames, lost_units=None, window=FAULT_WINDOW):
    """The node fault that ended ``job``, as a short sentence, or None (the job is lost).

    Args:
        job: a job record (see the module docstring).
        fault_log: the faults injected, in order.
        hostnames: ``{rank: hostname}``.
        lost_units: ``[{"rank", "unit", "time"}]``: the units sdexec ended as lost.
    """
    if not any(name == "clean" for name, _ in job.get("events", [])):
        return None
    exceptions = _exceptions(job)
    ranks = set(job.get("ranks") or [])
    if not exceptions:
        return _killed_by_lost_manager(job, ranks, fault_log, lost_units or [], hostnames, window)
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


def _killed_by_lost_manager(job, ranks, fault_log, lost_units, hostnames, window):
    finish = [c for name, c in job.get("events", []) if name == "finish"]
    if not finish or finish[0].get("status") != 9:
        return None
    mine = re.compile(rf"-{re.escape(job.get('id') or '?')}[:.]")
    for unit in lost_units:
        if unit["rank"] not in ranks or not mine.search(unit["unit"]):
            continue
        for fault in reversed(fault_log):  # the latest that fits
            if (
                fault["kind"] == "managerkill"
                and fault["rank"] == unit["rank"]
                and fault["start"] <= unit["time"] <= fault["end"] + window
            ):
                host = hostnames.get(fault["rank"], f"rank {fault['rank']}")
                return f"managerkill of {host} at {fault['start']:.1f} (its shell there lost)"
    return None


LOST_LINE = re.compile(
    r"^(\w{3} \d\d \d\d:\d\d:\d\d\.\d+) UTC (\d{4}) sdexec\.err\[(\d+)\]: "
    r"(\S+): unknown to systemd after the reconnect: ended$"
)


def parse_lost_units(lines):
    """The units sdexec ended as lost, from the instance's log (rank 0's ``log-filename``,
    which has every rank's lines): ``[{"rank", "unit", "time"}]``."""
    found = []
    for line in lines:
        m = LOST_LINE.match(line.rstrip("\n"))
        if m:
            when = datetime.strptime(f"{m[1]} {m[2]}", "%b %d %H:%M:%S.%f %Y")
            found.append({"rank": int(m[3]), "unit": m[4],
                          "time": when.replace(tzinfo=timezone.utc).timestamp()})  # fmt: skip
    return found


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
