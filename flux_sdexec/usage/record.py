"""The usage record: what one unit used, its JSON, where a job keeps it, and a job's total.

The one schema of the record that ``usage/cgroup_usage.py`` builds from a slice's
cgroup files and ``usage/unit_usage.py`` from the exited unit's properties,
``usage/accounting.py`` answers, ``usage/job_usage.py`` writes and ``flux sdexec usage``
reads.
Its JSON travels three ways: the ``usage`` field of an ``sdexec.wait`` answer (the record
alone), the job's KVS key ``job.<id>.sdexec-usage.<rank>`` (the record, then where it was
read: ``placed``), and each process of an ``sdexec.usage`` answer (the record, then which
process: ``live``). Pure: stdlib only; imports nothing of the package.
"""

import dataclasses
from typing import Optional

KVS_DIR = "sdexec-usage"  # in the job's KVS directory: one key per rank


@dataclasses.dataclass(frozen=True)
class Figure:
    """One figure of the record: how a job's ranks add up to its total, and how it is
    shown. Everything that totals, memos or prints the figures goes by FIGURE_TABLE."""

    name: str  # its key in the record and in the total
    adds_up: str  # "sum": summed over the ranks; "max": the largest rank's
    kind: str  # "seconds", "bytes" or "count": how ``flux sdexec usage`` prints it
    column: str  # its column in ``flux sdexec usage``
    memo: str  # its key in the job's memo: ``flux jobs -o '{user.sdexec.<memo>}'``
    with_rank: bool = False  # the total and the memo name the rank of the largest


FIGURE_TABLE = (
    Figure("cpu_s", "sum", "seconds", "CPU", "cpu"),
    Figure("cpu_user_s", "sum", "seconds", "USER", "cpu_user"),
    Figure("cpu_sys_s", "sum", "seconds", "SYS", "cpu_sys"),
    Figure("memory_peak", "max", "bytes", "MAXMEM", "maxmem", with_rank=True),
    Figure("tasks_peak", "max", "count", "TASKS", "tasks"),
    Figure("oom_kills", "sum", "count", "OOM", "oom"),
)
FIGURES = tuple(figure.name for figure in FIGURE_TABLE)


def dothex(jobid):
    """Job id ``jobid`` (an int) in the KVS's dotted-hex form (``0000.0012.3400.0000``)."""
    h = f"{jobid:016x}"
    return ".".join(h[i : i + 4] for i in range(0, 16, 4))


def kvs_dir(dothex):
    """The KVS directory of job ``dothex`` (its id in ``JobID.dothex`` form) holding the
    records of its ranks."""
    return f"job.{dothex}.{KVS_DIR}"


def kvs_key(dothex, rank):
    """The KVS key of rank ``rank``'s record of job ``dothex``."""
    return f"{kvs_dir(dothex)}.{rank}"


@dataclasses.dataclass(frozen=True)
class UsageRecord:
    """What one unit used, read from its accounting slice or from what systemd keeps of
    the exited unit (``usage/unit_usage.py``). A figure is None when it could not be read,
    never 0; ``null_reasons`` then says why."""

    cpu_user_s: Optional[float]  # CPU time in user mode, seconds
    cpu_sys_s: Optional[float]  # CPU time in kernel mode, seconds
    memory_peak: Optional[int]  # the most memory the kernel charged at once, bytes
    tasks_peak: Optional[int]  # the most tasks (threads) at once, a count
    oom_kills: Optional[int]  # tasks killed by the OOM killer, a count
    wall_s: Optional[float]  # from the start to the exit (or now, running), seconds (ms)
    result: Optional[str]  # systemd's Result ("success", "signal", ...); None while running
    status: Optional[int]  # the wait status of the main process; None while running
    null_reasons: Optional[dict] = None  # {figure: why it is None}; None: not in the JSON
    cpu_s: Optional[float] = None  # CPU time, user and kernel mode together, seconds (last:
    # added after the others, records of older writers lack it)

    def to_json(self):
        """The record as a JSON object, keys in the order they were always written."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        if self.null_reasons is None:
            del out["null_reasons"]
        return out

    @classmethod
    def from_json(cls, obj):
        """The record in JSON object ``obj``; a key it lacks is None. What it adds (where
        it was read: ``placed``, ``live``) is not part of the record."""
        return cls(**{f.name: obj.get(f.name) for f in dataclasses.fields(cls)})

    def placed(self, rank, host, unit):
        """The JSON of the job's KVS key: the record, read on ``rank`` (broker rank) of
        ``host`` (host name) from ``unit`` (unit name)."""
        return dict(self.to_json(), rank=rank, host=host, unit=unit)

    def live(self, unit, jobid, running):
        """One process of an ``sdexec.usage`` answer: the record of ``unit`` (unit name),
        job shell of ``jobid`` (f58plain, or None), ``running`` (figures read now)."""
        return dict(self.to_json(), unit=unit, jobid=jobid, running=running)


def summed(records, figure):
    """``figure`` summed over JSON records ``records``; None when no record gives it."""
    found = [r.get(figure) for r in records if r.get(figure) is not None]
    return round(sum(found), 6) if found else None


def largest(records, figure):
    """``(rank, value)`` of the record with the largest ``figure``; None when no record
    gives it."""
    found = [(r["rank"], r[figure]) for r in records if r.get(figure) is not None]
    return max(found, key=lambda pair: pair[1], default=None)


def total(records):
    """A job's total over its ranks' JSON records (each with its ``rank``): each figure
    summed or the largest, as FIGURE_TABLE says, with the rank of the largest where it
    asks; a figure no rank gave stays None."""
    out = {"ranks": len(records)}
    for figure in FIGURE_TABLE:
        if figure.adds_up == "sum":
            out[figure.name] = summed(records, figure.name)
            continue
        found = largest(records, figure.name)
        out[figure.name] = found[1] if found else None
        if figure.with_rank:
            out[f"{figure.name}_rank"] = found[0] if found else None
    return out
