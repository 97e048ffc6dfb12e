"""The state machine's own kills (broker/actions.py) on a stubbed bus: settled as
``sdexec.kill``'s are (calls.py), so one lost to a reconnect is sent again."""

import errno
import signal

import pytest

from flux_sdexec.broker.actions import ActionRunner
from flux_sdexec.config import Settings
from flux_sdexec.systemd.calls import Calls
from flux_sdexec.systemd.port import SystemdPort
from flux_sdexec.core.errors import UnitError
from flux_sdexec.core.events import (
    ClientGone,
    ContainmentChecked,
    KillUnit,
    StopTimerExpired,
    UnitChanged,
)

from helpers import CHECK, feed, new
from stubs import StubBridge, StubBus, StubLog, StubWatchers

UNIT = "job:f1.service"
RUNNING = UnitChanged({"ActiveState": "active", "SubState": "running", "ExecMainPID": 42})


def client_gone():
    """A foreground client went away: its process is SIGKILLed."""
    p = new(unit=UNIT)
    feed(p, RUNNING)
    return p, ClientGone(), signal.SIGKILL


def failed_check():
    """The containment check after the start failed: the process is SIGKILLed."""
    p = new(unit=UNIT, post_start_check=CHECK)
    feed(p, RUNNING)
    return p, ContainmentChecked("AllowedCPUs not enforced"), signal.SIGKILL


def stop_timer_step():
    """The unit did not stop within the stop timer: SIGTERM is the first step."""
    p = new(unit=UNIT, stop_timer_sec=5)
    feed(p, RUNNING, UnitChanged({"ActiveState": "deactivating", "SubState": "stop-sigterm"}))
    return p, StopTimerExpired(), signal.SIGTERM


class Parts:
    """The systemd side of the action runner: stub bridge, bus and timers, real Calls."""

    def __init__(self):
        self.bridge, self.bus, self.log = StubBridge(), StubBus(), StubLog()
        self.calls = Calls(self.bridge, self.bus, StubWatchers(), self.log, budget=300.0)


@pytest.fixture
def svc():
    return Parts()


def run(svc, p, event):
    """Feed ``event`` and carry out its systemd calls as the service does."""
    systemd = SystemdPort(svc.bridge, svc.bus, svc.calls, None, None)
    runner = ActionRunner(None, svc.log, 0, Settings(), None, systemd, None, None, None, None, None)
    for action in feed(p, event):
        if isinstance(action, KillUnit):
            runner.run(p, action)


@pytest.mark.parametrize("case", [client_gone, failed_check, stop_timer_step])
def test_a_kill_lost_to_a_reconnect_is_sent_again(svc, case):
    """Issue 22 finding 8: a kill whose reply was lost with the connection is sent again
    once the connection is back and systemd still has the unit."""
    p, event, signum = case()
    run(svc, p, event)
    svc.bridge.lose()  # a daemon-reexec: the signal may never have arrived
    svc.calls.reconnected()
    svc.bridge.answer("GetUnit")
    svc.bridge.answer("KillUnit")
    assert [(c.member, c.args) for c in svc.bridge.sent] == [
        ("KillUnit", (signum,)),
        ("GetUnit", ()),
        ("KillUnit", (signum,)),
    ]
    assert svc.calls.live == set() and svc.log.at("error") == []


def test_a_kill_of_a_unit_gone_meanwhile_is_logged_at_debug_level(svc):
    p, event, _ = client_gone()
    run(svc, p, event)
    svc.bridge.answer("KillUnit", UnitError(errno.ESRCH, "No main process to kill"))
    assert svc.log.at("error") == []
    assert svc.log.at("debug") == [f"kill main (signal 9) {UNIT}: No main process to kill"]


def test_a_kill_systemd_refuses_is_logged_as_an_error(svc):
    p, event, _ = client_gone()
    run(svc, p, event)
    svc.bridge.answer("KillUnit", UnitError(errno.EACCES, "Access denied"))
    assert svc.log.at("error") == [f"kill main (signal 9) {UNIT}: Access denied"]
