"""``flux sdexec units`` without flux: rows from each rank's ``sdexec.units`` answer.

Job shells carry the job id in their label (flux-core's bgexec: ``shell-<rank>-<f58plain>``,
``imp-shell-...`` for multi-user jobs) or unit name (bulk-exec's verbatim
``shell-<rank>-<f58plain>.service``); ``job_id`` reads it back as ``ƒ...``.
Pure: stdlib only.
"""

import re
import time

from flux_sdexec.cli.table import render

# an f58plain job id: "f" then base58 digits (no 0, O, I, l)
_SHELL_RE = re.compile(r"(?:imp-)?shell-\d+-f([1-9A-HJ-NP-Za-km-z]+)(?:[-.:]|\Z)")
UNTRACKED = "untracked"


def job_id(name):
    """The job id in a job shell's label or unit name (``ƒ...``), or None."""
    m = _SHELL_RE.match(name or "")
    return f"ƒ{m.group(1)}" if m else None


def _when(epoch):
    if not epoch:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch))


def rows(answers):
    """One row per process of each rank's answer, in rank order, tracked ones first.

    Args:
        answers: ``{rank: sdexec.units payload}``.
    """
    out = []
    for rank in sorted(answers):
        a = answers[rank]
        for p in a.get("procs", []):
            out.append(
                {
                    "rank": rank,
                    "unit": p["unit"],
                    "jobid": job_id(p.get("label")) or job_id(p["unit"]),
                    "state": p["state"],
                    "pid": p["pid"] if p.get("pid", -1) > 0 else None,
                    "start": _when(p.get("started")),
                    "label": p.get("label"),
                }
            )
        for u in a.get("untracked", []):
            out.append(
                {
                    "rank": rank,
                    "unit": u["unit"],
                    "jobid": job_id(u.get("label")) or job_id(u["unit"]),
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
)


def lines(rows_):
    """The table of ``flux sdexec units``."""
    return render(COLUMNS, rows_)
