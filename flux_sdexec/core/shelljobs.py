"""Job shells by name: the job id a job shell's label or unit name carries.

bgexec labels a shell ``shell-<rank>-<f58plain>`` (``imp-shell-...`` for multi-user jobs),
bulk-exec names its unit ``shell-<rank>-<f58plain>.service``. Pure: stdlib only.
"""

import re

# an f58plain job id: "f" then base58 digits (no 0, O, I, l)
F58_DIGITS = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_F58 = f"[{F58_DIGITS}]+"
_F58PLAIN_RE = re.compile(f"f{_F58}")
_SHELL_RE = re.compile(rf"(?:imp-)?shell-\d+-f({_F58})(?:[-.:]|\Z)")


def job_id(name):
    """The job id in a job shell's label or unit name, as f58plain (``f...``), or None."""
    m = _SHELL_RE.match(name or "")
    return f"f{m.group(1)}" if m else None


def is_f58plain(text):
    """Whether ``text`` is a job id in f58plain form (``f`` then base58 digits)."""
    return isinstance(text, str) and bool(_F58PLAIN_RE.fullmatch(text))


def job_number(plain):
    """The integer job id of an f58plain id (``f...``)."""
    n = 0
    for digit in plain[1:]:
        n = n * 58 + F58_DIGITS.index(digit)
    return n


def shell_job(p):
    """The f58plain job id of SdProc ``p`` if it is a job shell, else None."""
    return job_id(p.cmd.label) or job_id(p.unit.name)
