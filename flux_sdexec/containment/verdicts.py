"""A containment verdict, the text that fails an exec, and the tally of verdicts. Pure: stdlib only.

A Verdict says, for one constraint of one start, whether the kernel enforces it
(ENFORCED, NOT_ENFORCED, NOT_CHECKABLE), why, and which hierarchy decided (``v2``,
``v1:<controller>``, ``none``). UNENFORCEABLE is a NOT_ENFORCED verdict of a constraint this
host's manager never applies (``unenforceable``): counted apart, it fails no exec.
"""

import re
from collections import namedtuple

from flux_sdexec.containment.cgroups import V2

ENFORCED = "enforced"
NOT_ENFORCED = "not-enforced"
NOT_CHECKABLE = "not-checkable"
UNENFORCEABLE = "unenforceable"
OUTCOMES = (ENFORCED, NOT_ENFORCED, NOT_CHECKABLE, UNENFORCEABLE)
NOWHERE = "none"

Verdict = namedtuple("Verdict", "constraint outcome reason hierarchy", defaults=(NOWHERE,))

LOGGED_MAX = 64  # distinct reason classes a Tally remembers (and the adapter logs)
# what varies from one start to the next in a reason: parenthesised details (paths, unit
# names, byte counts), quoted values, and numbers with what is glued to them (pids, sizes,
# idsets, device numbers)
_VARYING = re.compile(r"\([^()]*\)|'[^']*'|\b\d(?:[\w.,:%-]*[\w%])?")


def hierarchy_label(hierarchy):
    """How a verdict names the hierarchy that decided: ``v2``, ``v1:<controller>``, ``none``."""
    return NOWHERE if hierarchy is None else V2 if hierarchy == V2 else f"v1:{hierarchy}"


def failure(verdicts):
    """The text to fail an exec with under ``enforce``: its first constraint not enforced."""
    for v in verdicts:
        if v.outcome == NOT_ENFORCED:
            return f"{v.constraint} not enforced: {v.reason}"
    return None


def reason_class(reason):
    """``reason`` with what varies between starts cut out: the same class for every pid."""
    return _VARYING.sub("…", reason)


class Tally:
    """Per constraint, how many starts had it enforced / not enforced / not checkable /
    unenforceable.

    Each reason a constraint was not enforced is reported once per class (``reason_class``,
    with the outcome and hierarchy), so a reason naming a pid or a job's values does not
    report every start; at most LOGGED_MAX classes are remembered, after which ``overflowed``
    is set and nothing new is reported.
    """

    def __init__(self):
        self._counts = {}
        self._said = set()
        self.overflowed = False

    def add(self, verdicts):
        """Count one start's verdicts; return those whose reason class is new."""
        new = []
        for v in verdicts:
            entry = self._counts.setdefault(
                v.constraint, {**{o: 0 for o in OUTCOMES}, "last_reason": ""}
            )
            entry[v.outcome] += 1
            entry["hierarchy"] = v.hierarchy
            entry["last_read"] = v.reason
            if v.outcome != ENFORCED:
                entry["last_reason"] = v.reason
                key = (v.constraint, v.outcome, v.hierarchy, reason_class(v.reason))
                if key in self._said:
                    continue
                if len(self._said) >= LOGGED_MAX:
                    self.overflowed = True
                    continue
                self._said.add(key)
                new.append(v)
        return new

    def stats(self):
        """``{constraint: {<outcome>: count, "last_reason", "hierarchy", "last_read"}}``.

        ``hierarchy`` decided the last start's verdict; ``last_read`` is what it said.
        """
        return {name: dict(entry) for name, entry in self._counts.items()}
