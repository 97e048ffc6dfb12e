"""``flux sdexec usage`` without flux: a job's per-rank records to table rows. Pure.

A record is the JSON of a ``usage.record.UsageRecord`` with its rank and host (the
job's KVS key ``sdexec-usage.<rank>``, or a rank's live ``sdexec.usage`` answer while it
runs, marked ``running``), or a rank without one: ``{"rank", "missing": why}``. With
``--watch``, each rank's CPU% since the sample before (``cpu_percent``).
"""

from flux_sdexec.cli.columns import render
from flux_sdexec.usage.record import FIGURE_TABLE, total

COLUMNS = (
    ("JOBID", "jobid"),
    ("RANK>", "rank"),
    ("HOST", "host"),
    *((f"{figure.column}>", figure.name) for figure in FIGURE_TABLE),
    ("RESULT", "result"),
)
WATCH_COLUMNS = COLUMNS[:3] + (("CPU%>", "cpu_percent"),) + COLUMNS[3:]


def _seconds(value):
    return None if value is None else f"{value:.2f}s"


def _bytes(value):
    if value is None:
        return None
    for unit in ("B", "K", "M", "G", "T"):
        if value < 1024 or unit == "T":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024


def _shown(figure, value):
    """``value`` of ``figure`` as the table prints it (None: blank)."""
    if figure.kind == "seconds":
        return _seconds(value)
    return _bytes(value) if figure.kind == "bytes" else value


def recorded(records):
    """The records that are records (a missing rank's is not)."""
    return [r for r in records if "missing" not in r]


def _cpu(record):
    """A record's CPU seconds: ``cpu_s``, or user plus system (a record without it)."""
    if record.get("cpu_s") is not None:
        return record["cpu_s"]
    split = [record.get(k) for k in ("cpu_user_s", "cpu_sys_s")]
    return None if None in split else sum(split)


def cpu_percent(before, after, seconds):
    """``{rank: CPU%}`` of the ranks in both samples (``{rank: record}``), ``seconds``
    apart: the CPU used over the wall time, 100 per CPU busy."""
    out = {}
    for rank, now in after.items():
        then = before.get(rank)
        used = (_cpu(now), _cpu(then) if then else None)
        if None not in used and seconds > 0:
            out[rank] = round(100 * (used[0] - used[1]) / seconds, 1)
    return out


def rows(jobid, records, percent=None):
    """Table rows of one job: one per rank (rank order), then the total; ``percent``:
    ``{rank: CPU%}`` (``--watch``)."""
    out = []
    for r in sorted(records, key=lambda r: r["rank"]):
        if "missing" in r:
            out.append({"jobid": jobid, "rank": r["rank"], "result": f"missing: {r['missing']}"})
            continue
        row = {"jobid": jobid, "rank": r["rank"], "host": r.get("host")}
        row.update({f.name: _shown(f, r.get(f.name)) for f in FIGURE_TABLE})
        row["result"] = "running" if r.get("running") else r.get("result")
        row["cpu_percent"] = (percent or {}).get(r["rank"])
        out.append(row)
    t = total(recorded(records))
    row = {"jobid": jobid, "rank": "total"}
    for figure in FIGURE_TABLE:
        value = t[figure.name]
        row[figure.name] = _shown(figure, value)
        rank = t.get(f"{figure.name}_rank")
        if figure.with_rank and value and rank is not None:
            row[figure.name] += f" (rank {rank})"
        elif figure.with_rank and not value:
            row[figure.name] = None
    out.append(row)
    return out


def lines(all_rows, watch=False):
    """The table of ``flux sdexec usage`` (with CPU%: ``--watch``)."""
    return render(WATCH_COLUMNS if watch else COLUMNS, all_rows)
