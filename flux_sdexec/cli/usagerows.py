"""``flux sdexec usage`` without flux: a job's per-rank records to rows and a total. Pure.

A record is what ``broker/accounting.py`` keeps for one job shell (the job's KVS key
``sdexec-usage.<rank>``, or a rank's live ``sdexec.usage`` answer while it runs).
"""

from flux_sdexec.cli.columns import render

COLUMNS = (
    ("JOBID", "jobid"),
    ("RANK>", "rank"),
    ("HOST", "host"),
    ("USER>", "user"),
    ("SYS>", "sys"),
    ("MAXMEM>", "maxmem"),
    ("TASKS>", "tasks"),
    ("OOM>", "oom"),
    ("RESULT", "result"),
)


def _seconds(value):
    return None if value is None else f"{value:.2f}s"


def _bytes(value):
    if value is None:
        return None
    for unit in ("B", "K", "M", "G", "T"):
        if value < 1024 or unit == "T":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024


def total(records):
    """The job's total: CPU summed, peak memory and tasks the largest (with the rank of
    the memory peak), OOM kills summed; a figure no rank gave stays None."""

    def values(key):
        return [r[key] for r in records if r.get(key) is not None]

    def summed(key):
        found = values(key)
        return round(sum(found), 6) if found else None

    peak = max(
        (r for r in records if r.get("memory_peak") is not None),
        key=lambda r: r["memory_peak"],
        default=None,
    )
    tasks = values("tasks_peak")
    return {
        "ranks": len(records),
        "cpu_user_s": summed("cpu_user_s"),
        "cpu_sys_s": summed("cpu_sys_s"),
        "memory_peak": peak["memory_peak"] if peak else None,
        "memory_peak_rank": peak["rank"] if peak else None,
        "tasks_peak": max(tasks) if tasks else None,
        "oom_kills": summed("oom_kills"),
    }


def _result(record):
    if record.get("running"):
        return "running"
    return record.get("result")


def rows(jobid, records):
    """Table rows of one job: one per rank (rank order), then the total."""
    out = []
    for r in sorted(records, key=lambda r: r["rank"]):
        out.append(
            {
                "jobid": jobid,
                "rank": r["rank"],
                "host": r.get("host"),
                "user": _seconds(r.get("cpu_user_s")),
                "sys": _seconds(r.get("cpu_sys_s")),
                "maxmem": _bytes(r.get("memory_peak")),
                "tasks": r.get("tasks_peak"),
                "oom": r.get("oom_kills"),
                "result": _result(r),
            }
        )
    t = total(records)
    where = f" (rank {t['memory_peak_rank']})" if t["memory_peak_rank"] is not None else ""
    out.append(
        {
            "jobid": jobid,
            "rank": "total",
            "user": _seconds(t["cpu_user_s"]),
            "sys": _seconds(t["cpu_sys_s"]),
            "maxmem": (_bytes(t["memory_peak"]) + where) if t["memory_peak"] else None,
            "tasks": t["tasks_peak"],
            "oom": t["oom_kills"],
        }
    )
    return out


def lines(all_rows):
    """The table of ``flux sdexec usage``."""
    return render(COLUMNS, all_rows)
