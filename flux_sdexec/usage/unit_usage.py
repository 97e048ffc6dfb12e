"""What a unit used, from what systemd keeps of it once it exited; and whether systemd does.

systemd 257 keeps an exited unit's ``CPUUsageNSec`` and ``MemoryPeak`` (Service interface)
after its cgroup is gone, for as long as the unit stays loaded: sdexec's units stay until
sdexec stops them after the exit, so a job shell then needs no accounting slice
(``usage/cgroup_usage.py``), which costs the user manager and the bus ~1.9 ms of CPU per
job. systemd 252 answers ``CPUUsageNSec`` = UINT64_MAX ("not set") for a unit without a
cgroup and has no ``MemoryPeak``. Which one runs is learnt from the first unit that
exits after load (``UsageSource``): no probe unit, which would show in flux-core's suites.

The unit source gives the total CPU (``cpu_s``) and the peak memory; no user/system split
and no tasks peak (absent, never 0). OOM kills: systemd's ``Result`` ``oom-kill`` says the
unit's cgroup had at least one (1); otherwise 0 where ``OOMPolicy`` is ``stop`` (systemd's
default, which flux-core's C sdexec keeps) or ``kill``, since systemd would have ended the
unit with that result at any kill; under ``continue`` a kill leaves no trace: absent.

Pure: stdlib only; the Get calls are the caller's (``usage/accounting.py``).
"""

import errno

from flux_sdexec.usage.record import FIGURES, UsageRecord

UNIT, SLICE = "unit", "slice"  # where a job shell's usage is read from
ASKED = ("CPUUsageNSec", "MemoryPeak")  # Service properties, Get at the exit
NOT_SET = 2**64 - 1  # systemd's "no value" for a uint64 property
LEARNING = "no unit has exited since load"
DEFAULT_OOM_POLICY = "stop"  # systemd's DefaultOOMPolicy=
# an answer that says nothing of systemd: ask again at the next exit
_TRANSPORT = frozenset((errno.ECONNRESET, errno.ENOTCONN, errno.ETIMEDOUT, errno.EPIPE))


def _unreported(name, answer):
    """Why ``answer`` (a value, or the OSError of its Get) gives no figure; None if it does."""
    if isinstance(answer, OSError):
        return f"systemd reports no {name} of an exited unit ({answer.strerror or answer})"
    if answer is None or answer == NOT_SET:
        return f"systemd reports no {name} of an exited unit"
    return None


def decide(answers):
    """The source from the first exited unit's ``answers`` (``{name: value or OSError}`` of
    ASKED): ``(UNIT, None)`` when systemd kept both, ``(SLICE, reason)`` when not, None
    when an answer was lost on the way (the connection, a deadline): ask again."""
    if any(isinstance(a, OSError) and a.errno in _TRANSPORT for a in answers.values()):
        return None
    for name in ASKED:
        why = _unreported(name, answers.get(name))
        if why is not None:
            return SLICE, why
    return UNIT, None


class UsageSource:
    """Where this sdexec reads job shells' usage: learnt once (``decide``), then kept."""

    def __init__(self):
        self.source = None  # UNIT or SLICE once decided
        self.reason = None  # why SLICE
        self.asking = False  # a unit's answers are awaited

    @property
    def learning(self):
        """Not decided yet and nobody asked: the next exit asks."""
        return self.source is None and not self.asking

    def answered(self, answers):
        """The asked unit's ``answers``: decide, or learn from the next exit."""
        self.asking = False
        if self.source is None:
            decided = decide(answers)
            if decided is not None:
                self.source, self.reason = decided

    def stats(self):
        """``sdexec.stats-get``'s ``usage-source``."""
        return {"source": self.source, "reason": self.reason if self.source else LEARNING}


def oom_kills(result, oom_policy):
    """``(count, why None)`` of a unit's OOM kills from systemd's ``Result`` and the unit's
    ``OOMPolicy`` (None: systemd's default); the module docstring."""
    if result == "oom-kill":
        return 1, None
    if (oom_policy or DEFAULT_OOM_POLICY) in ("stop", "kill"):
        return 0, None
    return None, (
        f"OOMPolicy={oom_policy}: systemd keeps the unit running at an OOM kill and records "
        "no count of its own"
    )


def record(answers, wall_s, result, status, oom_policy):
    """The UsageRecord of an exited unit from its ``answers`` (``{name: value or OSError}``
    of ASKED), ``wall_s`` (seconds), systemd's ``result``, the wait ``status`` and the
    unit's ``oom_policy`` (None: systemd's default)."""
    out, why = dict.fromkeys(FIGURES), {}
    only_total = "systemd keeps only an exited unit's total CPU (CPUUsageNSec)"
    why["cpu_user_s"] = why["cpu_sys_s"] = only_total
    why["tasks_peak"] = "systemd keeps no tasks peak of an exited unit"
    for name, figure, scale in (("CPUUsageNSec", "cpu_s", 1e-9), ("MemoryPeak", "memory_peak", 1)):
        answer = answers.get(name)
        unreported = _unreported(name, answer)
        if unreported is None:
            out[figure] = answer * scale if scale != 1 else answer
        else:
            why[figure] = unreported
    out["oom_kills"], oom_why = oom_kills(result, oom_policy)
    if oom_why is not None:
        why["oom_kills"] = oom_why
    wall_s = round(wall_s, 3) if wall_s is not None else None
    return UsageRecord(**out, wall_s=wall_s, result=result, status=status, null_reasons=why)
