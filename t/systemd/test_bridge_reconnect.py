"""Reconnecting and catching up without blocking (issue 22, finding 7): reconnect() and
read_unit() never wait for systemd, and read_unit() is answered in order on the hot path.

A manager that does not answer is a listening socket nobody accepts on: what a SIGSTOPped
or reexecuting manager's private socket looks like to a client (the kernel queues the
connect). The real manager is never stopped here.
"""

import errno
import select
import socket
import time

import pytest

from flux_sdexec.core.errors import UnitError

from conftest import WAIT_TIMEOUT
from test_bridge_async import Replies

SLEEP = "/bin/sleep"
QUICK = 2.0  # seconds: far below sd-bus's 25 s default, far above a connect


class Reads(Replies):
    """Replies for read_unit(): ``(error, props)`` by name."""

    def __call__(self, name):
        def on_reply(error, props=None):
            assert name not in self.got, f"{name}: answered twice"
            self.got[name] = (None, props) if error is None else ((error.errno, str(error)), None)

        return on_reply


@pytest.fixture
def stalled(tmp_path, monkeypatch):
    """XDG_RUNTIME_DIR whose systemd/private socket listens and never answers."""
    (tmp_path / "systemd").mkdir()
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "systemd" / "private"))
        sock.listen(16)
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
        yield str(tmp_path / "systemd" / "private")


def test_read_unit_gives_the_tracked_properties_and_load_state(sd):
    unit = sd.start([SLEEP, "100"])
    view = sd.wait_state(unit, "active", "running")
    reads, missing = Reads(), sd.new_unit()
    sd.bridge.read_unit(unit, reads("running"))
    sd.bridge.read_unit(missing, reads("missing"))
    (err, props), (err2, gone) = reads.wait(sd, "running", "missing")
    assert err is None and err2 is None
    entered = props.pop("ActiveEnterTimestamp")
    assert props == {**view, "LoadState": "loaded"} and entered > 0
    assert (gone["LoadState"], gone["ActiveState"], gone["SubState"]) == (
        "not-found",
        "inactive",
        "dead",
    )


NOTIFY = (("Type", "s", "notify"), ("NotifyAccess", "s", "all"), ("RemainAfterExit", "b", False))


def test_read_unit_says_whether_a_notify_unit_was_ever_active(sd):
    """What impfatal's drain rests on after a reconnect (review 2026-12b, finding 7): a
    Type=notify unit that exits 1 before READY=1 (the IMP refusing a shell) reads
    ActiveEnterTimestamp 0 once failed; one that sent READY=1 first reads it set, though it
    reads "failed" as well."""
    never = sd.start(["/bin/sh", "-c", "exit 1"], *NOTIFY)
    ready = sd.start(["/bin/sh", "-c", "systemd-notify --ready; sleep 0.2; exit 1"], *NOTIFY)
    for unit in (never, ready):
        sd.wait_for(unit, lambda v: v.get("ActiveState") == "failed")
    reads = Reads()
    sd.bridge.read_unit(never, reads("never"))
    sd.bridge.read_unit(ready, reads("ready"))
    (err, never_props), (err2, ready_props) = reads.wait(sd, "never", "ready")
    assert err is None and err2 is None
    assert never_props["ActiveState"] == ready_props["ActiveState"] == "failed"
    assert never_props["ActiveEnterTimestamp"] == 0
    assert ready_props["ActiveEnterTimestamp"] > 0


def test_a_lookup_sent_before_a_read_does_not_see_the_stub_it_loads(sd):
    """The catch-up's order: GetUnit first, then GetAll on the same connection; GetAll of a
    unit systemd does not have loads a "not-found" stub, which GetUnit then would find."""
    replies, reads, unit = Replies(), Reads(), sd.new_unit()
    sd.bridge.get_unit(unit, on_reply=replies("lookup"))
    sd.bridge.read_unit(unit, reads("read"))
    assert replies.wait(sd, "lookup")[0][0] == errno.ENOENT
    assert reads.wait(sd, "read")[0][1]["LoadState"] == "not-found"


def test_reconnect_to_a_manager_that_does_not_answer_returns_at_once(sd, stalled):
    """reconnect() no longer waits for Subscribe() (25 s per way tried before); a read sent
    on the stalled connection does not block either, and fails at its deadline."""
    began = time.monotonic()
    sd.bridge.reconnect()
    assert time.monotonic() - began < QUICK
    assert sd.bridge.via == stalled and not sd.bridge.subscribed
    reads = Reads()
    sd.bridge.read_unit(sd.new_unit(), reads("read"), timeout=0.2)
    sd.bridge.pump()
    assert time.monotonic() - began < QUICK and reads.got == {}
    sd.bridge.expire(now=time.monotonic() + 0.2)
    assert reads.got == {"read": ((errno.ETIMEDOUT, "systemd did not answer"), None)}


def test_subscribed_once_the_manager_answers_and_signals_flow(sd):
    unit = sd.new_unit()
    sd.bridge.reconnect()
    assert not sd.bridge.subscribed
    deadline = time.monotonic() + WAIT_TIMEOUT
    while not sd.bridge.subscribed:
        left = deadline - time.monotonic()
        assert left > 0, "Subscribe() not answered"
        select.select([sd.bridge], [], [], left)
        sd.bridge.pump()
    sd.start([SLEEP, "0"], unit=unit)
    sd.wait_state(unit, "active", "exited")


def test_drop_fails_pending_calls_and_reconnect_restores(sd):
    """drop() (a pump that keeps failing) gives the connection up like a loss: each pending
    call is answered ECONNRESET once, calls and pump() raise it, reconnect() restores."""
    replies, reads = Replies(), Reads()
    unit = sd.start([SLEEP, "100"])
    sd.wait_state(unit, "active", "running")
    sd.bridge.get_unit(unit, on_reply=replies("lookup"))
    sd.bridge.read_unit(unit, reads("read"))
    sd.bridge.drop()
    assert replies.got == {"lookup": (errno.ECONNRESET, "lost connection to systemd")}
    assert reads.got == {"read": ((errno.ECONNRESET, "lost connection to systemd"), None)}
    for call in (sd.bridge.pump, lambda: sd.bridge.read_unit(unit, reads("never"))):
        with pytest.raises(UnitError) as exc:
            call()
        assert exc.value.errno == errno.ECONNRESET
    sd.bridge.reconnect()
    sd.bridge.read_unit(unit, reads("again"))
    assert reads.wait(sd, "again")[0][1]["SubState"] == "running"
