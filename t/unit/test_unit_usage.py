"""Usage from the unit itself (usage/unit_usage.py): which source systemd's answers about
the first exited unit decide, and the record made of an exited unit's properties. Answers
as systemd 252 (this machine) and 257 (Debian 13) gave them."""

import errno

import pytest

from flux_sdexec.core.errors import UnitError
from flux_sdexec.usage import unit_usage
from flux_sdexec.usage.unit_usage import NOT_SET, SLICE, UNIT, UsageSource

UNKNOWN_PROPERTY = UnitError(
    errno.ENXIO, "Unknown interface org.freedesktop.systemd1.Service or property MemoryPeak."
)
SYSTEMD_257 = {"CPUUsageNSec": 953872000, "MemoryPeak": 135286784}
SYSTEMD_252 = {"CPUUsageNSec": NOT_SET, "MemoryPeak": UNKNOWN_PROPERTY}


@pytest.mark.parametrize(
    "answers, decided",
    [
        (SYSTEMD_257, (UNIT, None)),
        (SYSTEMD_252, (SLICE, "systemd reports no CPUUsageNSec of an exited unit")),
        (
            {"CPUUsageNSec": 5, "MemoryPeak": UNKNOWN_PROPERTY},
            (
                SLICE,
                "systemd reports no MemoryPeak of an exited unit (Unknown interface "
                "org.freedesktop.systemd1.Service or property MemoryPeak.)",
            ),
        ),
        (
            {"CPUUsageNSec": 5, "MemoryPeak": NOT_SET},
            (SLICE, "systemd reports no MemoryPeak of an exited unit"),
        ),
        ({"CPUUsageNSec": UnitError(errno.ECONNRESET, "lost"), "MemoryPeak": 1}, None),
        ({"CPUUsageNSec": 1, "MemoryPeak": UnitError(errno.ETIMEDOUT, "no answer")}, None),
    ],
)
def test_the_first_exited_unit_s_answers_decide_the_source(answers, decided):
    """Both figures kept: the unit; one missing or UINT64_MAX: the slice, saying which;
    an answer lost on the way decides nothing."""
    assert unit_usage.decide(answers) == decided


def test_the_source_is_learnt_once_and_asked_by_one_exit_at_a_time():
    source = UsageSource()
    assert source.learning and source.stats() == {
        "source": None,
        "reason": "no unit has exited since load",
    }
    source.asking = True
    assert not source.learning  # a second exit meanwhile does not ask
    source.answered({"CPUUsageNSec": UnitError(errno.ECONNRESET, "lost"), "MemoryPeak": 1})
    assert source.learning  # lost: the next exit asks again
    source.asking = True
    source.answered(SYSTEMD_252)
    assert (source.source, source.learning) == (SLICE, False)
    source.answered(SYSTEMD_257)  # never decided again
    assert source.stats() == {
        "source": SLICE,
        "reason": "systemd reports no CPUUsageNSec of an exited unit",
    }


def test_a_record_from_the_unit_has_cpu_and_peak_the_split_and_tasks_absent_not_0():
    rec = unit_usage.record(SYSTEMD_257, 12.34567, "success", 0, None)
    assert rec.to_json() == {
        "cpu_s": 0.953872,
        "cpu_user_s": None,
        "cpu_sys_s": None,
        "memory_peak": 135286784,
        "tasks_peak": None,
        "oom_kills": 0,
        "wall_s": 12.346,
        "result": "success",
        "status": 0,
        "null_reasons": {
            "cpu_user_s": "systemd keeps only an exited unit's total CPU (CPUUsageNSec)",
            "cpu_sys_s": "systemd keeps only an exited unit's total CPU (CPUUsageNSec)",
            "tasks_peak": "systemd keeps no tasks peak of an exited unit",
        },
    }


def test_a_figure_systemd_did_not_give_is_absent_with_why():
    """A Get refused or not answered in time: that figure null, never 0, never waited on."""
    answers = {
        "CPUUsageNSec": UnitError(errno.ETIMEDOUT, "systemd did not answer"),
        "MemoryPeak": NOT_SET,
    }
    rec = unit_usage.record(answers, None, "signal", 9, None)
    assert (rec.cpu_s, rec.memory_peak, rec.wall_s) == (None, None, None)
    assert rec.null_reasons["cpu_s"] == (
        "systemd reports no CPUUsageNSec of an exited unit (systemd did not answer)"
    )
    assert rec.null_reasons["memory_peak"] == "systemd reports no MemoryPeak of an exited unit"


@pytest.mark.parametrize(
    "result, policy, kills",
    [
        ("oom-kill", None, 1),  # at least one: systemd keeps no count
        ("oom-kill", "continue", 1),
        ("success", None, 0),  # systemd's default stop: any kill would have ended it oom-kill
        ("signal", "stop", 0),
        ("exit-code", "kill", 0),
        ("success", "continue", None),  # a kill leaves no trace under continue
    ],
)
def test_oom_kills_from_the_result_and_the_oom_policy(result, policy, kills):
    rec = unit_usage.record(SYSTEMD_257, 1.0, result, 0, policy)
    assert rec.oom_kills == kills
    assert ("oom_kills" in rec.null_reasons) is (kills is None)
    if kills is None:
        assert rec.null_reasons["oom_kills"].startswith("OOMPolicy=continue: ")
