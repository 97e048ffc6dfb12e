"""The hot path's calls sent without waiting: replies, errors, deadlines and bus loss."""

import errno
import os
import select
import signal
import socket
import time

import pytest

from flux_sdexec.core.errors import UnitError
from flux_sdexec.core.unitstate import TRACKED

from conftest import WAIT_TIMEOUT, exec_props, state

TRUE, SLEEP = "/bin/true", "/bin/sleep"


class Replies:
    """on_reply callbacks that record what they were given, by name."""

    def __init__(self):
        self.got = {}

    def __call__(self, name):
        def on_reply(error):
            assert name not in self.got, f"{name}: answered twice"
            self.got[name] = None if error is None else (error.errno, str(error))

        return on_reply

    def wait(self, sd, *names):
        """Pump until every named call has its reply; return them in order."""
        deadline = time.monotonic() + WAIT_TIMEOUT
        while not all(n in self.got for n in names):
            left = deadline - time.monotonic()
            assert left > 0, f"no reply for {[n for n in names if n not in self.got]}"
            select.select([sd.bridge], [], [], left)
            sd.bridge.pump()
        return [self.got[n] for n in names]


def test_start_without_waiting(sd):
    """A start sent without waiting is answered by a later pump(); the unit then runs."""
    replies, unit = Replies(), sd.new_unit()
    sd.bridge.start_transient_unit(unit, exec_props([TRUE]), replies("start"))
    assert replies.wait(sd, "start") == [None]
    assert sd.wait_state(unit, "active", "exited")["ExecMainStatus"] == 0


def test_error_replies_carry_the_errno(sd):
    """Error replies map as the blocking calls do: UnitExists EEXIST, PropertyReadOnly
    EROFS, InvalidArgs EINVAL, NoSuchUnit ENOENT, NoSuchProcess ESRCH."""
    replies, bridge = Replies(), sd.bridge
    running, exited, missing = sd.start([SLEEP, "100"]), sd.start([TRUE]), sd.new_unit()
    sd.wait_state(exited, "active", "exited")
    bridge.start_transient_unit(running, exec_props([TRUE]), replies("dup"))
    bridge.start_transient_unit(sd.new_unit(), exec_props([TRUE], ("xxx", "s", "y")), replies("ro"))
    bridge.start_transient_unit(
        sd.new_unit(), exec_props([TRUE], ("Type", "s", "x")), replies("inval")
    )
    bridge.stop_unit(missing, on_reply=replies("stop"))
    bridge.kill_unit(exited, signal.SIGTERM, on_reply=replies("kill"))
    assert replies.wait(sd, "dup", "ro", "inval", "stop", "kill") == [
        (errno.EEXIST, f"Unit {running} was already loaded or has a fragment file."),
        (errno.EROFS, "Cannot set property xxx, or unknown property."),
        (errno.EINVAL, "Invalid Type setting: x"),
        (errno.ENOENT, f"Unit {missing} not loaded."),
        (errno.ESRCH, "No main process to kill"),
    ]


def test_deadline_fails_the_call_once(sd):
    """A call past its deadline gets ETIMEDOUT from expire(); its late reply is dropped."""
    replies = Replies()
    unit = sd.start([SLEEP, "100"])
    sd.wait_state(unit, "active", "running")
    sd.bridge.kill_unit(unit, signal.SIGTERM, on_reply=replies("kill"), timeout=0.0)
    assert sd.bridge.next_deadline() is not None
    sd.bridge.expire()
    assert replies.got == {"kill": (errno.ETIMEDOUT, "systemd did not answer")}
    assert sd.bridge.next_deadline() is None
    view = sd.wait_state(unit, "active", "exited")  # the kill itself was carried out
    assert view["ExecMainStatus"] == signal.SIGTERM


def test_tracked_properties_match_getall(sd):
    """What the signals decode to (tracked names only) agrees with a full GetAll."""
    unit = sd.start([SLEEP, "100"])
    view = sd.wait_state(unit, "active", "running")
    assert set(view) <= set(TRACKED)
    full = sd.bridge.get_unit_properties(unit)
    assert {k: full[k] for k in view} == view


def test_bus_loss_fails_pending_calls_and_reconnects(sd):
    """Losing the bus with calls in flight: pump() answers each of them ECONNRESET once,
    then raises; after reconnect() the watched units' signals flow again."""
    replies = Replies()
    running = sd.start([SLEEP, "100"])
    sd.wait_state(running, "active", "running")
    sd.bridge.kill_unit(running, signal.SIGTERM, on_reply=replies("kill"))
    with socket.socket(fileno=os.dup(sd.bridge.fileno())) as sock:
        sock.shutdown(socket.SHUT_RDWR)  # µs after the send: the reply takes two hops
    with pytest.raises(UnitError) as exc:  # a call on a lost bus fails at once
        sd.bridge.stop_unit(running, on_reply=replies("never"))
    assert exc.value.errno == errno.ECONNRESET
    with pytest.raises(UnitError) as exc:
        sd.bridge.pump()
    assert exc.value.errno == errno.ECONNRESET
    assert replies.got == {"kill": (errno.ECONNRESET, "lost connection to systemd")}
    assert sd.bridge.next_deadline() is None
    sd.bridge.reconnect()
    sd.bridge.stop_unit(running, on_reply=replies("stop"))
    assert replies.wait(sd, "stop") == [None]
    sd.wait_state(running, "inactive", "dead")


def test_get_unit_says_whether_systemd_has_the_unit(sd):
    """GetUnit, the lookup that settles a call whose reply was lost: None while the unit
    is loaded, ENOENT once systemd forgot it (or never had it)."""
    replies, unit = Replies(), sd.start([TRUE])
    sd.wait_state(unit, "active", "exited")
    sd.bridge.get_unit(unit, on_reply=replies("loaded"))
    sd.bridge.get_unit(sd.new_unit(), on_reply=replies("missing"))
    loaded, missing = replies.wait(sd, "loaded", "missing")
    assert loaded is None
    assert missing[0] == errno.ENOENT


def test_stop_in_replace_mode_stops_the_unit(sd):
    """The sweeper's StopUnit(mode "replace") stops a running unit like mode "fail"."""
    replies, unit = Replies(), sd.start([SLEEP, "100"])
    sd.wait_state(unit, "active", "running")
    sd.bridge.stop_unit(unit, on_reply=replies("stop"), mode="replace")
    assert replies.wait(sd, "stop") == [None]
    sd.wait_state(unit, "inactive", "dead")


def test_a_predecessors_last_signals_are_not_the_new_units(sd, sd2):
    """A label reused at once: the old unit of its name is let go on another connection
    (the holds' GetUnit says it is gone) and the new one started on the hot path at once.
    The old unit's last PropertiesChanged (its reset from failed, its exit status in them)
    can still be unread on the hot path then: they come before the new start's answer, and
    must not reach on_change as the new unit's (seen under load in t0041: a wait for the
    reused label answered with the old exit status)."""
    unit = sd.new_unit()
    sd.start(["/bin/sh", "-c", "exit 3"], unit=unit)
    sd.wait_for(unit, lambda p: state(p) == ("failed", "failed") and p.get("ExecMainStatus") == 3)
    sd2.bridge.reset_failed_unit(unit)  # another connection; this one not read meanwhile
    with pytest.raises(UnitError) as gone:
        sd2.bridge.get_unit(unit)  # answered once systemd has unloaded it
    assert gone.value.errno == errno.ENOENT
    sd.bridge.unwatch(unit)
    sd.bridge.watch(unit)
    seen = len(sd.signals[unit])
    replies = Replies()
    sd.bridge.start_transient_unit(unit, exec_props(["/bin/sh", "-c", "exit 5"]), replies("start"))
    assert replies.wait(sd, "start") == [None]
    sd.cursor[unit], sd.views[unit] = seen, {}
    sd.wait_for(unit, lambda p: state(p) == ("failed", "failed"))
    statuses = [s["ExecMainStatus"] for s in sd.signals[unit][seen:] if "ExecMainStatus" in s]
    assert statuses and set(statuses) <= {0, 5}, statuses
