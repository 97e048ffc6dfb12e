"""Drained ranks during a chaos run: each one recorded (ranks, time, reason) and undrained at
once, so that later jobs can run there; the verdict then says which drains a fault explains.

A rank is drained by job-exec (a shell that ended before its first barrier, EDEADLK, EIO) or by
sdexec (the IMP's own error before the shell ran); the chaos test cannot leave it drained
without starving the rest of the run.
"""

import subprocess

from . import nodeverdict

CMD_TIMEOUT = 60


class DrainKeeper:
    """``round()``: record and undrain every drain not seen yet; ``drains``: all of them."""

    def __init__(self, log):
        self.log = log
        self.drains = []  # {"ranks": [..], "timestamp": t, "reason": text}
        self._seen = set()

    def round(self):
        res = run(["flux", "resource", "drain", "-n", "-o", "{ranks}|{timestamp}|{reason}"])
        for line in res.stdout.splitlines():
            ranks, stamp, reason = (line.split("|", 2) + ["", ""])[:3]
            if not ranks.strip() or (ranks, stamp) in self._seen:
                continue
            self._seen.add((ranks, stamp))
            drain = {"ranks": nodeverdict.expand_idset(ranks.strip()),
                     "timestamp": float(stamp or 0), "reason": reason.strip()}  # fmt: skip
            self.drains.append(drain)
            self.log(f"    | drained: ranks {ranks.strip()}: {drain['reason']} (undraining)")
            run(["flux", "resource", "undrain", ranks.strip()])


def run(cmd):
    """``cmd``'s CompletedProcess (text), or exit 1 when it does not end within CMD_TIMEOUT."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=CMD_TIMEOUT)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(cmd, 1, "", f"no answer within {CMD_TIMEOUT}s")
