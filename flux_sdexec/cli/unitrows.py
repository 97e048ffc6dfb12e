"""``flux sdexec units`` without flux: rows from each rank's ``sdexec.units`` answer.

Job shells carry the job id in their label (flux-core's bgexec: ``shell-<rank>-<f58plain>``,
``imp-shell-...`` for multi-user jobs) or unit name (bulk-exec's verbatim
``shell-<rank>-<f58plain>.service``); ``job_id`` reads it back (f58plain, which the command
prints as flux does: ``ƒ`` in a UTF-8 locale). Pure: stdlib only.
"""

import re
import time

from flux_sdexec.cli.table import render

# an f58plain job id: "f" then base58 digits (no 0, O, I, l)
_SHELL_RE = re.compile(r"(?:imp-)?shell-\d+-f([1-9A-HJ-NP-Za-km-z]+)(?:[-.:]|\Z)")
UNTRACKED = "untracked"


def job_id(name):
    """The job id in a job shell's label or unit name, as f58plain (``f...``), or None."""
    m = _SHELL_RE.match(name or "")
    return f"f{m.group(1)}" if m else None


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
)


def lines(rows_):
    """The table of ``flux sdexec units``."""
    return render(COLUMNS, rows_)
