"""systemd/sweeper.py on a stubbed bus: units stopped until systemd forgets them."""

import errno

import pytest

from flux_sdexec.core import settle
from flux_sdexec.systemd.sweeper import Sweeper
from flux_sdexec.core.errors import UnitError

from stubs import StubBridge, StubBus, StubLog, StubWatchers

UNIT = "u:f1.service"
GONE = UnitError(errno.ENOENT, f"Unit {UNIT} not loaded.")


@pytest.fixture
def sd():
    bridge, watchers, log = StubBridge(), StubWatchers(), StubLog()
    return bridge, watchers, log, Sweeper(bridge, StubBus(), watchers, log, lambda: 25.0)


def test_a_loaded_unit_is_stopped_replacing_its_start_job_and_reset_each_round(sd):
    bridge, watchers, log, sweeper = sd
    sweeper.sweep(UNIT, "exec failed: systemd-timeout (300s) ran out")
    assert UNIT in sweeper and len(sweeper) == 1
    assert log.at("warning") == [
        f"{UNIT}: exec failed: systemd-timeout (300s) ran out; stopping it until systemd lets go"
    ]
    for attempt in range(3):
        bridge.answer("GetUnit")
        bridge.answer("StopUnit", UnitError(errno.EBUSY, "stop job still running"))
        bridge.answer("ResetFailedUnit", UnitError(errno.EIO, "not failed"))
        [timer] = watchers.armed()
        assert timer.after == settle.sweep_delay(attempt)
        timer.fire()
    stops = [c for c in bridge.sent if c.member == "StopUnit"]
    assert len(stops) == 3 and all(c.kwargs == {"mode": "replace"} for c in stops)
    bridge.answer("GetUnit", GONE)
    assert UNIT not in sweeper and sweeper.units() == [] and sweeper.swept == 1
    assert watchers.armed() == [] and all(t.destroyed for t in watchers.timers)
    assert log.at("info") == [f"{UNIT}: gone after 4 rounds"]


def test_a_unit_already_gone_takes_one_lookup(sd):
    bridge, watchers, _, sweeper = sd
    sweeper.sweep(UNIT, "stop: lost connection to systemd")
    bridge.answer("GetUnit", GONE)
    assert bridge.members() == ["GetUnit"] and sweeper.swept == 1 and watchers.armed() == []


def test_a_unit_swept_twice_is_swept_once(sd):
    bridge, _, log, sweeper = sd
    sweeper.sweep(UNIT, "first")
    sweeper.sweep(UNIT, "second")
    assert bridge.members() == ["GetUnit"] and len(log.at("warning")) == 1


def test_a_lookup_lost_with_the_connection_is_tried_again_next_round(sd):
    bridge, watchers, _, sweeper = sd
    sweeper.sweep(UNIT, "stop: refused")
    bridge.lose()
    [timer] = watchers.armed()
    bridge.refuse_next(UnitError(errno.ECONNRESET, "lost connection to systemd"))
    timer.fire()  # not even sent: the next round tries again
    watchers.armed()[0].fire()
    bridge.answer("GetUnit", GONE)
    assert bridge.members() == ["GetUnit", "GetUnit"] and sweeper.swept == 1


def test_close_stops_the_rounds_and_returns_the_units_not_gone(sd):
    bridge, watchers, _, sweeper = sd
    sweeper.sweep(UNIT, "exec failed")
    sweeper.sweep("v:f1.service", "exec failed")
    bridge.answer("GetUnit", GONE)  # the first is gone
    assert sweeper.close() == ["v:f1.service"]
    assert sweeper.swept == 1 and len(sweeper) == 0 and watchers.armed() == []
    bridge.answer("GetUnit")  # the second's answer, after close: nothing more is sent
    sweeper.sweep("w:f1.service", "stop: refused")  # unloading: kept for take's caller only
    assert bridge.members() == ["GetUnit", "GetUnit"]
    assert sweeper.take() == ["w:f1.service"] and sweeper.take() == []
