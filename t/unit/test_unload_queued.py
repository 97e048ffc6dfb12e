"""Unload with a start job still queued (issue 22 finding 5): the unit is stopped, so the
start cannot run after sdexec has gone. The flux tier's test is in t0020."""

import errno

import pytest

from flux_sdexec.broker.actions import ActionRunner
from flux_sdexec.config import Settings
from flux_sdexec.core.events import Reap, RespondError, StopUnit, UnitChanged, Unloading
from flux_sdexec.core.lifecycle import UNLOADING_TEXT
from flux_sdexec.core.unitstate import forget_call
from flux_sdexec.systemd.calls import Calls
from flux_sdexec.systemd.port import SystemdPort

from helpers import feed, new
from stubs import StubBridge, StubBus, StubLog, StubWatchers

UNIT = "job:f1.service"
# systemd's first signal of a unit whose start job waits: loaded, inactive, never run yet
QUEUED = UnitChanged({"ActiveState": "inactive", "SubState": "dead"})


def taken(*events):
    """A foreground exec whose StartTransientUnit systemd took, then ``events``."""
    p = new(unit=UNIT)
    feed(p, *events)
    return p


@pytest.mark.parametrize("seen", [(QUEUED,), ()], ids=["inactive", "no-signal-yet"])
def test_unload_stops_a_unit_whose_start_job_is_queued(seen):
    p = taken(*seen)
    assert feed(p, Unloading()) == [RespondError(errno.ENOSYS, UNLOADING_TEXT), StopUnit(), Reap()]


def test_unload_leaves_alone_a_unit_that_ran_and_is_gone():
    p = taken(
        UnitChanged({"ActiveState": "active", "SubState": "running", "ExecMainPID": 42}),
        UnitChanged({"ActiveState": "inactive", "SubState": "dead"}),
    )
    assert StopUnit() not in feed(p, Unloading())


def test_a_unit_that_never_ran_is_stopped_only_when_nothing_will_watch_it():
    """Elsewhere a queued start is left to run, watched, and stopped once it has."""
    assert forget_call("inactive") is None
    assert forget_call("inactive", queued=True) == "stop"
    assert forget_call("unknown", queued=True) == "stop"
    assert forget_call("failed", queued=True) == "reset-failed"


def test_stop_unit_replaces_a_queued_start_job():
    """StopUnit in mode "fail" is refused while a start job is queued."""
    bridge, bus, log = StubBridge(), StubBus(), StubLog()
    calls = Calls(bridge, bus, StubWatchers(), log)
    systemd = SystemdPort(bridge, bus, calls, None, None)
    runner = ActionRunner(None, log, 0, Settings(), None, systemd, None, None, None, None, None)
    runner.run(taken(QUEUED), StopUnit())
    assert [(c.member, c.unit, c.kwargs) for c in bridge.sent] == [
        ("StopUnit", UNIT, {"mode": "replace"})
    ]
