"""Job shells by name: the job id a job shell's label or unit name carries.

bgexec labels a shell ``shell-<rank>-<f58plain>`` (``imp-shell-...`` for multi-user jobs),
bulk-exec names its unit ``shell-<rank>-<f58plain>.service``. Pure: stdlib only.
"""

import re

# an f58plain job id: "f" then base58 digits (no 0, O, I, l), a 64-bit number (flux's
# flux_jobid_t): at most 11 digits, the largest fjpXCZedGfVQ. A longer one would be
# another job's in the KVS (its dotted hex keeps 64 bits).
F58_DIGITS = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_F58 = f"[{F58_DIGITS}]{{1,11}}"
_F58PLAIN_RE = re.compile(f"f{_F58}")
_SHELL_RE = re.compile(rf"(?:imp-)?shell-\d+-(f{_F58})(?:[-.:]|\Z)")
_JOBID_LIMIT = 1 << 64


def job_id(name):
    """The job id in a job shell's label or unit name, as f58plain (``f...``), or None
    (also for an id that does not fit 64 bits)."""
    m = _SHELL_RE.match(name or "")
    return m.group(1) if m and is_f58plain(m.group(1)) else None


def is_f58plain(text):
    """Whether ``text`` is a job id in f58plain form (``f`` then base58 digits) that fits
    64 bits."""
    return (
        isinstance(text, str)
        and bool(_F58PLAIN_RE.fullmatch(text))
        and job_number(text) < _JOBID_LIMIT
    )


def job_number(plain):
    """The integer job id of an f58plain id (``f...``)."""
    n = 0
    for digit in plain[1:]:
        n = n * 58 + F58_DIGITS.index(digit)
    return n


def shell_job(p):
    """The f58plain job id of SdProc ``p`` if it is a job shell, else None."""
    return job_id(p.cmd.label) or job_id(p.unit.name)
