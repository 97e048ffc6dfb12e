"""The containment tally stays bounded however many execs it sees (issue 22, #10).

It remembered each (constraint, reason text) it had logged, and some reasons carry a pid
("no cgroups for pid N", every short command that exits before the check) or a job's values:
1000 short constrained execs added 2000 entries and logged 2000 warnings. Reasons are now
remembered by class (without pids and values) and at most LOGGED_MAX classes.
"""

import string

from flux_sdexec.containment import enforcement
from flux_sdexec.broker import containment_check
from flux_sdexec.containment.enforcement import NOT_CHECKABLE, NOT_ENFORCED, PostStartCheck, Verdict

GONE_PIDS = range(4_000_000, 4_001_000)  # above any pid_max: no such process


class Log:
    def __init__(self):
        self.lines = []

    def warning(self, text):
        self.lines.append(text)


def test_a_thousand_short_execs_log_one_line_per_constraint():
    """Each exec's process is gone before the check: one warning per constraint in all."""
    log = Log()
    checker = containment_check.ContainmentChecker(log, "warn")
    spec = PostStartCheck({"MemoryMax": "1G", "TasksMax": "10"}, constrained=False)
    for pid in GONE_PIDS:
        assert checker.check(pid, spec, f"x{pid}:t1.service") is None
    assert log.lines == [
        "x4000000:t1.service: MemoryMax not-checkable: no cgroups for pid 4000000:"
        " No such file or directory (first seen)",
        "x4000000:t1.service: TasksMax not-checkable: no cgroups for pid 4000000:"
        " No such file or directory (first seen)",
    ]
    assert len(checker.tally._said) == 2
    stats = checker.stats()["constraints"]
    assert [stats[c][NOT_CHECKABLE] for c in ("MemoryMax", "TasksMax")] == [1000, 1000]
    assert stats["MemoryMax"]["last_reason"].startswith("no cgroups for pid 4000999:")


def test_values_that_differ_per_job_are_one_class():
    """A cap that is wrong by a different amount for each job is reported once."""
    tally = enforcement.Tally()
    new = []
    for n in range(1000):
        reason = f"unified: v2 memory.max is {n * 4096}, expected 50% ({n * 8192} bytes)"
        new += tally.add([Verdict("MemoryMax", NOT_ENFORCED, reason, "v2")])
    assert [v.reason for v in new] == ["unified: v2 memory.max is 0, expected 50% (0 bytes)"]


def test_other_kinds_of_reason_are_still_reported():
    """The class keeps the words: a file unavailable and a wrong value are two reports."""
    tally = enforcement.Tally()
    reasons = [
        "unified: v2 memory.max unavailable (is memory controller delegated?)",
        "unified: v2 memory.max is 1, expected 2",
        "unified: v2 memory.max is max, expected 2",
        "unified: v2 memory.max is 3, expected 4",
    ]
    new = [v.reason for r in reasons for v in tally.add([Verdict("MemoryMax", NOT_ENFORCED, r)])]
    assert new == reasons[:3]


def test_at_most_logged_max_classes_then_one_line_saying_so(monkeypatch):
    """1000 different kinds of reason: LOGGED_MAX remembered and logged, plus one line."""
    words = (
        "".join(string.ascii_lowercase[(n // 26**i) % 26] for i in range(3)) for n in range(1000)
    )
    verdicts = iter([Verdict("CPUQuota", NOT_ENFORCED, f"reason {w}")] for w in words)
    monkeypatch.setattr(
        containment_check, "check_containment", lambda pid, wanted, unit, *where: next(verdicts)
    )
    log = Log()
    checker = containment_check.ContainmentChecker(log, "warn")
    spec = PostStartCheck({"CPUQuota": "20%"}, constrained=False)
    for pid in range(1000):
        checker.check(pid, spec, "u.service")
    assert len(checker.tally._said) == enforcement.LOGGED_MAX
    assert len(log.lines) == enforcement.LOGGED_MAX + 1
    assert log.lines[-1] == (
        f"u.service: containment: {enforcement.LOGGED_MAX} kinds of reasons logged, no more"
        " will be (flux module stats sdexec shows the last of each constraint)"
    )
    assert checker.stats()["constraints"]["CPUQuota"][NOT_ENFORCED] == 1000
