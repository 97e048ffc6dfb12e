"""``flux sdexec units`` without flux: rows from each rank's ``sdexec.units`` answer.

Job shells carry the job id in their label (flux-core's bgexec: ``shell-<rank>-<f58plain>``,
``imp-shell-...`` for multi-user jobs) or unit name (bulk-exec's verbatim
``shell-<rank>-<f58plain>.service``); ``core.shelljobs.job_id`` reads it back (f58plain,
which the command prints as flux does: ``ƒ`` in a UTF-8 locale). Pure: stdlib only.
"""

import time

from flux_sdexec.cli.columns import render
from flux_sdexec.core.shelljobs import job_id

UNTRACKED = "untracked"
# the state shown for a job shell being stopped because its job is over (orphans.py)
ORPHAN = "orphan"


def _when(epoch):
    if not epoch:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch))


def rows(answers, encode=str):
    """One row per process of each rank's answer, in rank order, tracked ones first.

    Args:
        answers: ``{rank: sdexec.units payload}``.
        encode: a job id (f58plain) -> its printed form (the command: flux's f58).
    """

    def jobid(entry):
        plain = job_id(entry.get("label")) or job_id(entry["unit"])
        return encode(plain) if plain else None

    out = []
    for rank in sorted(answers):
        a = answers[rank]
        for p in a.get("procs", []):
            out.append(
                {
                    "rank": rank,
                    "unit": p["unit"],
                    "jobid": jobid(p),
                    "state": ORPHAN if p.get("orphan") else p["state"],
                    "pid": p["pid"] if p.get("pid", -1) > 0 else None,
                    "start": _when(p.get("started")),
                    "label": p.get("label"),
                    "reason": p.get("orphan") or _no_waiter(p.get("job")),
                }
            )
        for u in a.get("untracked", []):
            out.append(
                {
                    "rank": rank,
                    "unit": u["unit"],
                    "jobid": jobid(u),
                    "state": f"{UNTRACKED} ({u.get('unit_state')})",
                    "label": u.get("label"),
                }
            )
    return out


COLUMNS = (
    ("RANK>", "rank"),
    ("UNIT", "unit"),
    ("JOBID", "jobid"),
    ("STATE", "state"),
    ("PID>", "pid"),
    ("START", "start"),
    ("LABEL", "label"),
    ("REASON", "reason"),
)


def _no_waiter(seen):
    """A suspect shell's note: nothing waits on it, and what its job was last seen as."""
    return f"no waiter; {seen}" if seen else None


def lines(rows_):
    """The table of ``flux sdexec units``."""
    return render(COLUMNS, rows_)
