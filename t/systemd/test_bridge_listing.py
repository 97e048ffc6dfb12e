"""Listing units on the hot path without waiting (review 2026-12b, finding 8): what
``sdexec.units`` with ``all`` sends while the reactor runs.

The second test stops the real user manager for about half a second (SIGSTOP to the pid
the session bus gives for org.freedesktop.systemd1, checked to be this uid's systemd),
always followed by SIGCONT in a ``finally``, and by a watchdog process of its own that
sends SIGCONT after FREEZE_MAX seconds should this process die first. Other users of the
manager wait that long; nothing is restarted or reexecuted.
"""

import contextlib
import errno
import os
import select
import signal
import subprocess
import time

from test_bridge_reconnect import Reads

SLEEP = "/bin/sleep"
FREEZE_MAX = 3  # seconds the manager can stay stopped, whatever happens to this test
DEADLINE = 0.5  # the stalled listing's deadline


def test_a_listing_sent_without_waiting_gives_what_the_blocking_one_gives(sd):
    unit = sd.start([SLEEP, "100"])
    sd.wait_state(unit, "active", "running")
    missing = sd.new_unit()
    reads = Reads()
    sd.bridge.list_units([unit, missing], on_reply=reads("listing"))
    [(err, listed)] = reads.wait(sd, "listing")
    assert err is None
    assert listed == [(unit, "active", "running")] == sd.bridge.list_units([unit, missing])


def manager_pid():
    """The user manager's pid, as the session bus knows it; checked to be this uid's
    systemd before anything is sent to it."""
    out = subprocess.run(
        ["busctl", "--user", "call", "org.freedesktop.DBus", "/org/freedesktop/DBus"]
        + ["org.freedesktop.DBus", "GetConnectionUnixProcessID", "s", "org.freedesktop.systemd1"],
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    ).stdout.split()
    assert out[0] == "u", out
    pid = int(out[1])
    with open(f"/proc/{pid}/comm") as f:
        assert f.read().strip() == "systemd"
    assert os.stat(f"/proc/{pid}").st_uid == os.getuid()
    return pid


@contextlib.contextmanager
def stopped(pid):
    """The manager ``pid`` SIGSTOPped for the block; SIGCONT after it, or from the
    watchdog (its own session: a signal to this test's group does not reach it) after
    FREEZE_MAX seconds."""
    watchdog = subprocess.Popen(
        ["/bin/sh", "-c", 'sleep "$1"; kill -CONT "$2"', "watchdog", str(FREEZE_MAX), str(pid)],
        start_new_session=True,
    )
    try:
        os.kill(pid, signal.SIGSTOP)
        yield
    finally:
        os.kill(pid, signal.SIGCONT)
        watchdog.kill()
        watchdog.wait()


def test_a_listing_to_a_stopped_manager_blocks_nothing(sd):
    """Sent to a stopped manager the listing returns at once, the owner's loop keeps
    turning (select, pump, expire: what the bus watcher does on the reactor), and the call
    is answered once, ETIMEDOUT at its deadline, while the manager is still stopped. Once
    it runs again, the next listing gets through and the stalled one's late reply is
    dropped."""
    unit = sd.start([SLEEP, "100"])
    sd.wait_state(unit, "active", "running")
    pid = manager_pid()
    reads = Reads()
    with stopped(pid):
        t0 = time.monotonic()
        sd.bridge.list_units([unit], on_reply=reads("stalled"), timeout=DEADLINE)
        sent_in = time.monotonic() - t0
        turns = 0
        while "stalled" not in reads.got and time.monotonic() - t0 < FREEZE_MAX - 1:
            select.select([sd.bridge], [], [], 0.02)
            sd.bridge.pump()
            sd.bridge.expire()
            turns += 1
        answered_in = time.monotonic() - t0
    assert sent_in < 0.1
    assert reads.got["stalled"] == ((errno.ETIMEDOUT, "systemd did not answer"), None)
    assert DEADLINE <= answered_in < FREEZE_MAX - 1 and turns >= 10
    sd.bridge.list_units([unit], on_reply=reads("after"))
    [(err, listed)] = reads.wait(sd, "after")
    assert err is None and listed == [(unit, "active", "running")]
