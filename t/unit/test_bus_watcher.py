"""BusWatcher (systemd/bus.py) on a stubbed bridge and hand-fired timers:
issue 22 finding 13 (a pump that fails the same way each time), finding 7 (reconnect
attempts only on the backoff timer, none per RPC), and the deadline timer.

bus.py imports flux's constants and watchers module: flux's Python path is added first.
"""

import errno

import fluxpath
from flux_sdexec.core.errors import UnitError

fluxpath.add()

from flux_sdexec.systemd.bus import MAX_ERRORS, BusWatcher  # noqa: E402

LOST = UnitError(errno.ECONNRESET, "lost connection to systemd")


class Runaway(BaseException):
    """Raised by the stub when a pump goes on far past any sane bound (no `except
    Exception` catches it, so a loop without end fails the test instead of hanging)."""


class Bridge:
    """pump() raises ``sticky`` each time, else each of ``fail`` once, then works."""

    def __init__(self):
        self.fail = []
        self.sticky = None
        self.pumps = self.reconnects = self.drops = 0
        self.refuse_reconnect = False
        self.lost = False
        self.subscribed = True
        self.deadlines = []

    def pump(self):
        self.pumps += 1
        if self.pumps > 1000:
            raise Runaway(f"{self.pumps} pumps")
        if self.lost:
            raise LOST
        if self.sticky is not None:
            raise self.sticky
        if self.fail:
            raise self.fail.pop(0)

    def drop(self):
        self.drops += 1
        self.lost = True

    def reconnect(self):
        self.reconnects += 1
        if self.refuse_reconnect:
            raise UnitError(errno.ECONNREFUSED, "connect: Connection refused")
        self.lost, self.subscribed, self.fail, self.sticky = False, False, [], None

    def fileno(self):
        return 7

    def next_deadline(self):
        return self.deadlines[0] if self.deadlines else None

    def wants_write(self):
        return False

    def expire(self):
        self.deadlines.clear()


class Watcher:
    def __init__(self, func):
        self.func, self.running, self.after = func, False, None

    def start(self):
        self.running = True

    def stop(self):
        self.running = False

    def destroy(self):
        self.running = False

    def reset(self, after):
        self.after, self.running = after, True

    def fire(self):
        assert self.running
        self.running = False
        self.func()


class Watchers:
    def __init__(self):
        self.timers = {}

    def timer(self, after, func, what):
        self.timers[what] = Watcher(func)
        return self.timers[what]

    def fd(self, fd, events, func, what):
        return Watcher(func)

    def shield(self, func, what):
        return func  # a test sees what a callback raises


class Log:
    def __init__(self):
        self.lines = []

    def __getattr__(self, level):
        return lambda text: self.lines.append((level, text))


def watcher():
    bridge, watchers, log, catch_ups = Bridge(), Watchers(), Log(), []
    bus = BusWatcher(bridge, watchers, log, lambda: catch_ups.append(bridge.reconnects))
    return bus, bridge, watchers, log, catch_ups


def test_a_pump_failing_the_same_way_each_time_ends_and_reconnects():
    """Finding 13: sd_bus_process keeps returning the same error (not a disconnect): the
    pump gives up after MAX_ERRORS in a row, drops the connection and reconnects, instead
    of looping without end."""
    bus, bridge, _, log, catch_ups = watcher()
    bridge.sticky = UnitError(errno.EBADMSG, "process: Bad message")
    bus.pump()
    assert bridge.drops == 1 and bridge.reconnects == 1 and catch_ups == [1]
    assert bridge.pumps == MAX_ERRORS + 2  # the errors, the loss, the new connection
    errors = [text for level, text in log.lines if level == "error"]
    assert errors.count("bus: process: Bad message") == MAX_ERRORS
    assert "lost connection to systemd, reconnecting" in errors


def test_errors_below_the_bound_are_logged_and_the_pump_goes_on():
    bus, bridge, _, log, _ = watcher()
    bridge.fail = [RuntimeError("a callback raised")] * (MAX_ERRORS - 1)
    bus.pump()
    assert bridge.drops == bridge.reconnects == 0 and bridge.pumps == MAX_ERRORS
    assert len(log.lines) == MAX_ERRORS - 1


def test_while_reconnecting_rpcs_do_not_retry_only_the_backoff_timer_does():
    """Finding 7: with the connection down, each RPC's pump() retried the reconnect at once.
    Now the first attempt is immediate and the next ones come from the retry timer."""
    bus, bridge, watchers, log, catch_ups = watcher()
    bridge.lost, bridge.refuse_reconnect = True, True
    bus.pump()
    assert bridge.reconnects == 1
    for _ in range(20):  # RPCs served meanwhile
        bus.pump()
    assert bridge.reconnects == 1
    retry = watchers.timers["reconnect"]
    assert retry.running and retry.after == 0.02
    retry.fire()
    assert bridge.reconnects == 2 and retry.after == 0.04
    bridge.refuse_reconnect = False
    retry.fire()
    assert bridge.reconnects == 3 and catch_ups == [3] and not retry.running


def test_reconnected_once_systemd_answers_subscribe_a_loss_before_backs_off():
    """A new connection proves alive when systemd answers its Subscribe() (sent without
    waiting): only then "reconnected" and the count; lost before that, the next attempt
    waits for the retry timer (no busy reconnect loop against a refusing manager)."""
    bus, bridge, watchers, log, catch_ups = watcher()
    bridge.lost = True
    bus.pump()
    assert bridge.reconnects == 1 and bus.reconnects == 0
    bridge.lost = True  # the new connection is lost before Subscribe() was answered
    bus.pump()
    assert bridge.reconnects == 1 and watchers.timers["reconnect"].running
    watchers.timers["reconnect"].fire()
    assert bridge.reconnects == 2 and bus.reconnects == 0
    bridge.subscribed = True
    bus.pump()
    assert bus.reconnects == 1
    assert any(text.startswith("reconnected to systemd after") for _, text in log.lines)
    bridge.lost = True  # a later loss, after it proved alive: reconnected at once again
    bus.pump()
    assert bridge.reconnects == 3 and catch_ups == [1, 2, 3]


def test_the_deadline_timer_follows_the_oldest_call():
    bus, bridge, watchers, _, _ = watcher()
    timer = watchers.timers["bus deadline"]
    bridge.deadlines = [0.0]
    bus.sent()
    assert timer.running
    timer.fire()
    assert bridge.deadlines == [] and not timer.running
