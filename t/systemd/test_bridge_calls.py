"""SystemdBridge against the real systemd user instance: its connection (private socket or
bus, loss and reconnect, closed), systemd's errors, unit queries, unwatch, signal order.
"""

import errno
import os
import signal
import socket
import uuid

import pytest

from conftest import Harness, state
from flux_sdexec.core.errors import UnitError

TRUE, SLEEP = "/bin/true", "/bin/sleep"


def test_private_socket_first(sd):
    """The hot path reaches the manager over its private socket, as systemctl does."""
    assert sd.bridge.via == os.path.join(os.environ["XDG_RUNTIME_DIR"], "systemd", "private")
    unit = sd.start([TRUE])
    assert sd.wait_state(unit, "active", "exited")["ExecMainStatus"] == 0


def test_bus_when_private_socket_refuses(user_systemd, tmp_path, monkeypatch):
    """A private socket nobody listens on (stale, or not ours) leaves the bus to carry
    calls and signals."""
    (tmp_path / "systemd").mkdir()
    with socket.socket(socket.AF_UNIX) as stale:
        stale.bind(str(tmp_path / "systemd" / "private"))  # bound, never listening
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
        harness = Harness()
    try:
        assert harness.bridge.via == "the user bus"
        unit = harness.start([TRUE])
        assert harness.wait_state(unit, "active", "exited")["ExecMainStatus"] == 0
    finally:
        harness.cleanup()


def test_unknown_property(sd):
    """systemd rejects an unknown property as PropertyReadOnly, which sd-bus maps to EROFS."""
    unit = sd.new_unit()
    with pytest.raises(UnitError) as exc:
        sd.start([TRUE], ("xxx", "s", "yyz"), unit=unit)
    assert (exc.value.errno, str(exc.value)) == (
        errno.EROFS,
        "Cannot set property xxx, or unknown property.",
    )
    assert sd.bridge.list_units([unit]) == []


def test_bad_property_value(sd):
    """A bad value is InvalidArgs: EINVAL with systemd's text."""
    with pytest.raises(UnitError) as exc:
        sd.start([TRUE], ("Type", "s", "bogus"))
    assert (exc.value.errno, str(exc.value)) == (errno.EINVAL, "Invalid Type setting: bogus")


def test_duplicate_unit(sd):
    """Starting a second unit with a loaded unit's name is UnitExists: EEXIST."""
    unit = sd.start([SLEEP, "100"])
    with pytest.raises(UnitError) as exc:
        sd.start([TRUE], unit=unit)
    assert (exc.value.errno, str(exc.value)) == (
        errno.EEXIST,
        f"Unit {unit} was already loaded or has a fragment file.",
    )


@pytest.mark.parametrize("call", ["stop", "kill", "reset"])
def test_missing_unit(sd, call):
    """Stop, kill and reset-failed of a unit that is not loaded are NoSuchUnit: ENOENT."""
    unit = sd.new_unit()
    method = {
        "stop": lambda: sd.bridge.stop_unit(unit),
        "kill": lambda: sd.bridge.kill_unit(unit, signal.SIGKILL),
        "reset": lambda: sd.bridge.reset_failed_unit(unit),
    }[call]
    with pytest.raises(UnitError) as exc:
        method()
    assert (exc.value.errno, str(exc.value)) == (errno.ENOENT, f"Unit {unit} not loaded.")


def test_list_units(sd):
    """ListUnitsByPatterns globs give (name, ActiveState, SubState); no match gives []."""
    tag = f"pytest-{uuid.uuid4().hex[:8]}"
    units = [sd.new_unit(f"{tag}-{x}.service") for x in ("a", "b", "cc")]
    for unit in units:
        sd.start([SLEEP, "100"], unit=unit)
        sd.wait_state(unit, "active", "running")
    listed = sd.bridge.list_units([f"{tag}-?.service"])
    assert sorted(listed) == [(unit, "active", "running") for unit in units[:2]]
    assert sd.bridge.list_units([f"{tag}-nomatch-*"]) == []


def test_get_unit_properties(sd):
    """GetAll merges Unit and Service properties, decoded to plain Python."""
    unit = sd.start([SLEEP, "100"])
    view = sd.wait_state(unit, "active", "running")
    props = sd.bridge.get_unit_properties(unit)
    picked = {k: props[k] for k in ("Id", "ActiveState", "SubState", "Type", "RemainAfterExit")}
    assert picked == {
        "Id": unit,
        "ActiveState": "active",
        "SubState": "running",
        "Type": "exec",
        "RemainAfterExit": True,
    }
    assert props["ExecMainPID"] == props["MainPID"] == view["ExecMainPID"] > 0
    assert props["Environment"] == ["LANG=C"]
    assert props["ExecStart"][0][:2] == (SLEEP, [SLEEP, "100"])


def test_get_unit_properties_missing(sd):
    """GetAll on a unit that is not loaded answers LoadState not-found, not an error."""
    props = sd.bridge.get_unit_properties(sd.new_unit())
    assert state(props) == ("inactive", "dead")
    assert props["LoadState"] == "not-found"


def test_unwatch(sd, sd2):
    """After unwatch(), the unit's signals no longer reach on_change()."""
    unit = sd.start([TRUE])
    sd.wait_state(unit, "active", "exited")
    sd.bridge.unwatch(unit)
    count = len(sd.signals[unit])
    sd2.bridge.watch(unit)  # a second connection gets the same broadcast signals
    sd.bridge.stop_unit(unit)
    sd2.wait_state(unit, "inactive", "dead")
    sd.bridge.pump()
    assert len(sd.signals[unit]) == count


def test_connection_loss_and_reconnect(sd):
    """A dropped connection raises ECONNRESET; reconnect() restores calls and the watched set."""
    unit = sd.new_unit()
    with socket.socket(fileno=os.dup(sd.bridge.fileno())) as sock:
        sock.shutdown(socket.SHUT_RDWR)
    for call in (sd.bridge.pump, lambda: sd.bridge.stop_unit(unit), sd.bridge.fileno):
        with pytest.raises(UnitError) as exc:
            call()
        assert (exc.value.errno, str(exc.value)) == (
            errno.ECONNRESET,
            "lost connection to systemd",
        )
    sd.bridge.reconnect()
    sd.start([TRUE], unit=unit)
    assert sd.wait_state(unit, "active", "exited")["ExecMainStatus"] == 0


def test_closed_bridge(sd):
    """Calls on a closed bridge raise ENOTCONN instead of touching a freed bus."""
    sd.bridge.close()
    with pytest.raises(UnitError) as exc:
        sd.bridge.pump()
    assert (exc.value.errno, str(exc.value)) == (errno.ENOTCONN, "not connected to systemd")


def test_signals_queued_during_call(sd, sd2):
    """Signals read while a call waited for its reply are delivered by the next pump().

    sd2 proves the unit finished; sd's blocking call then drains them into sd-bus's queue
    (its fd need not be readable any more), so the owner must pump() after every call.
    """
    unit = sd.start([TRUE])
    sd2.bridge.watch(unit)
    sd2.wait_state(unit, "active", "exited")
    sd.bridge.list_units([unit])
    sd.bridge.pump()
    assert ("active", "exited") in sd.states(unit)
