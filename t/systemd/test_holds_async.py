"""holds.py's release on a real flux reactor (a loop:// handle): the Unref never blocks it,
and the name is free for a start once ``on_released`` says so (the ordering guarantee).

A bus that answers late is a listening socket nobody accepts on (as in
test_bridge_reconnect.py): the real session bus is never stopped here.
"""

import errno
import logging
import socket
import time

import pytest

from conftest import systemctl
from test_holds import ended_inactive, shown, unloaded

flux = pytest.importorskip("flux", reason="flux's Python bindings are not installed")

from flux_sdexec.systemd.holds import UNREF_TIMEOUT, Holds  # noqa: E402
from flux_sdexec.broker.watchers import Watchers  # noqa: E402
from flux_sdexec.core.errors import UnitError  # noqa: E402

LOG = logging.getLogger("test")
REQUESTS_PARTS = (
    "log rank settings local_uri namer registry feed responder watchers releases after_release"
    " lookups listings orphans accounting job_usage stats"
).split()
BOUND = 5.0  # seconds any reactor run below may take


@pytest.fixture
def late_bus(tmp_path, monkeypatch):
    """DBUS_SESSION_BUS_ADDRESS of a bus that takes the connection and never answers."""
    path = tmp_path / "bus"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        sock.listen(16)
        monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", f"unix:path={path}")
        yield


def run(h):
    """Run the reactor until a callback stops it, at most BOUND seconds."""
    bound = h.timer_watcher_create(BOUND, lambda *a: h.reactor_stop())
    bound.start()
    h.reactor_run()
    bound.stop()


def test_a_release_against_a_late_bus_leaves_the_reactor_running(late_bus):
    """Before: release() awaited the Unref, blocking the reactor up to 1 s per release."""
    h = flux.Flux("loop://")
    released = []

    def on_released(unit, lost):
        released.append((unit, time.monotonic()))
        h.reactor_stop()

    holds = Holds(LOG, Watchers(h, LOG), on_released=on_released)
    try:
        holds.hold("late.service")
        assert holds.held == {"late.service"}
        began = time.monotonic()
        holds.release("late.service")
        returned = time.monotonic() - began
        assert returned < 0.1, f"release() took {returned:.3f}s"
        assert holds.releasing("late.service") and not released
        pings = []  # a 10 ms timer: the reactor's other work
        ping = h.timer_watcher_create(0.0, lambda *a: pings.append(time.monotonic()), 0.01)
        ping.start()
        run(h)
        ping.stop()
        assert [unit for unit, _ in released] == ["late.service"]
        waited = released[0][1] - began
        assert UNREF_TIMEOUT * 0.9 <= waited < UNREF_TIMEOUT + 1.0
        gap = max(b - a for a, b in zip(pings, pings[1:]))
        assert len(pings) > 40 and gap < 0.2, f"{len(pings)} pings, largest gap {gap:.3f}s"
        assert not holds.releasing("late.service")
    finally:
        holds.close()


def test_the_name_is_free_for_a_start_once_released(sd, tmp_path):
    """The start sdexec makes of a label reused waits for on_released (after_release.py);
    then systemd has collected the old unit, and a start of its name is taken (before the
    GetUnit after the Unref's answer, 1 start in 30 under load still found it loaded)."""
    h = flux.Flux("loop://")
    started = []

    def start_again(unit, lost):
        try:
            sd.start(["/bin/true"], unit=unit)
            started.append("started")
        except UnitError as exc:
            started.append(exc.errno)
        h.reactor_stop()

    holds = Holds(LOG, Watchers(h, LOG), on_released=start_again)
    try:
        unit = ended_inactive(sd, holds, tmp_path / "gate")
        with pytest.raises(UnitError) as held:  # what the wait avoids: the old unit is loaded
            sd.start(["/bin/true"], unit=unit)
        assert held.value.errno == errno.EEXIST
        holds.release(unit)
        if holds.releasing(unit):  # else answered while it was sent: on_released ran at once
            run(h)
        assert started == ["started"]
        sd.wait_state(unit, "inactive", "dead")
    finally:
        holds.close()
        systemctl("reset-failed", unit)


def test_an_exec_of_a_name_being_released_waits_for_on_released():
    """requests.py: a start whose unit name's Unref is not answered yet waits in
    after_release and is served once on_released says the name is free."""
    from flux_sdexec.broker.after_release import StartsAfterRelease
    from flux_sdexec.broker.requests import Requests
    from flux_sdexec.core.naming import UnitNamer
    from flux_sdexec.core.protocol import ExecRequest
    from flux_sdexec.core.registry import Registry
    from flux_sdexec.systemd.port import SystemdPort

    served, unit = [], "L:t1.service"
    after = StartsAfterRelease(
        lambda msg, verb, func: served.append(msg), lambda *a: None, lambda msg: "client"
    )
    releasing = {unit}

    class Releasing:
        def pending(self, name):
            return name in releasing

    parts = {name: None for name in REQUESTS_PARTS}  # none is needed before the start waits
    parts.update(registry=Registry(), after_release=after, releases=Releasing())
    parts.update(namer=UnitNamer("t1", 0, False), systemd=SystemdPort(None, None, None, None, None))
    req = ExecRequest(cmdline=["/bin/true"], env={}, label="L", background=True)
    assert Requests(**parts)._start("msg", req) == unit
    assert after.has(unit=unit) and served == []  # nothing started: no bridge was needed
    releasing.clear()
    after.released(unit)  # what the service's on_released does
    assert served == ["msg"] and not after.has(unit=unit)


def test_a_late_unref_never_leaves_an_ended_unit_without_a_reference(sd, tmp_path, monkeypatch):
    """Review 2026-12b finding 3: an Unref not answered in UNREF_TIMEOUT moved the holds to a
    new connection by closing the old one first: systemd, told the old one was gone before
    the new Ref came, collected a held unit that had ended (exit status and all).

    The late answer is made by hand (a slow bus cannot be made here without disturbing the
    session bus other tests share): the Unref is sent with its answer left unread, and
    ``_late`` runs as the timer would."""
    h = flux.Flux("loop://")
    released = []

    def on_released(unit, lost):
        released.append(unit)
        h.reactor_stop()

    holds = Holds(LOG, Watchers(h, LOG), on_released=on_released)
    try:
        kept = ended_inactive(sd, holds, tmp_path / "gate-kept")
        other = ended_inactive(sd, holds, tmp_path / "gate-other")
        with monkeypatch.context() as m:
            m.setattr(holds, "_drain", lambda: None)  # the answer not in yet
            holds.release(other)
        assert holds.releasing(other)
        holds._late(other)  # UNREF_TIMEOUT passed with the answer unread
        if holds.releasing(other):
            run(h)
        assert released == [other]
        assert shown(kept) == ["ActiveState=inactive", "ExecMainStatus=0", "LoadState=loaded"]
        assert holds.held == {kept}
        holds.release(kept)
        if holds.releasing(kept):
            run(h)
        assert unloaded(kept) and unloaded(other)
    finally:
        holds.close()
