"""Watching the systemd bus on the reactor: pumping signals and replies, reconnecting.

``BusWatcher`` owns the fd watchers on the bridge's connection (POLLIN always,
POLLOUT while sd-bus has queued output) and the timer of the pending calls'
deadlines. ``pump()`` hands queued PropertiesChanged to their processes and
replies to their callers (call it after every blocking systemd call, see
bridge.py; call ``sent()`` after a call sent without waiting). A lost connection
is re-opened at once, without waiting for systemd (bridge.reconnect); when that fails,
or the new connection is lost before systemd answered its Subscribe(), only the retry
timer tries again, after a growing pause (``settle.reconnect_delay``: 20 ms doubling to
2 s, as a daemon-reexec takes ~100 ms). After each reconnect ``on_reconnected()`` lets the
service catch up on every unit (catchup.py).
"""

import errno
import time

from flux.constants import FLUX_POLLIN, FLUX_POLLOUT

from flux_sdexec.core.errors import UnitError
from flux_sdexec.core.settle import reconnect_delay

LOG_EVERY = 10  # a failed reconnect attempt is logged the first time and every tenth
MAX_ERRORS = 10  # errors in a row in one pump before the connection is given up as lost


class BusWatcher:
    """Args:
    bridge: the open SystemdBridge.
    watchers: a ``watchers.Watchers``.
    log: the module's BrokerLogger.
    on_reconnected: called after a reconnect, to re-read every tracked unit.
    """

    def __init__(self, bridge, watchers, log, on_reconnected):
        self.bridge = bridge
        self._watchers = watchers
        self._log = log
        self._on_reconnected = on_reconnected
        self._watcher = self._out = None
        self._writing = False
        self._retry = watchers.timer(0, self._reconnect, "reconnect")
        self._retrying = False  # the retry timer is armed: no connection until it fires
        self._attempts = 0  # reconnects tried since the connection last proved alive
        self._lost_at = None  # when the connection was lost; None while it is up
        self._deadline = None  # when the deadline timer fires, None when not armed
        self._timer = watchers.timer(0, self._expire, "bus deadline")
        self._pumping = False
        self.reconnects = 0  # connections to systemd re-opened since load (stats-get)
        # called from the watchers and after every systemd call: never raises
        self.pump = watchers.shield(self._pump, "bus")
        self._watch()

    def _watch(self):
        self._unwatch()
        fd = self.bridge.fileno()
        self._watcher = self._watchers.fd(fd, FLUX_POLLIN, self._pump, "bus")
        self._watcher.start()
        self._out = self._watchers.fd(fd, FLUX_POLLOUT, self._pump, "bus out")
        self._writing = False

    def _unwatch(self):
        for w in (self._watcher, self._out):
            if w is not None:
                w.stop()
                w.destroy()
        self._watcher = self._out = None

    def sent(self):
        """A call went out without waiting: watch its deadline, and POLLOUT if sd-bus
        could not write it all."""
        deadline = self.bridge.next_deadline()
        if deadline is not None and (self._deadline is None or deadline < self._deadline):
            self._deadline = deadline
            self._timer.reset(after=max(0.0, deadline - time.monotonic()))
        writing = self.bridge.wants_write()
        if writing != self._writing and self._out is not None:
            self._writing = writing
            (self._out.start if writing else self._out.stop)()

    def _expire(self):
        self._deadline = None
        self.bridge.expire()
        self.sent()

    def _pump(self):
        """Hand systemd's queued signals and replies on (not re-entrant).

        A callback that raises is logged and the pump goes on with the next message:
        messages sd-bus already read would not make the fd readable again. MAX_ERRORS in
        a row (sd_bus_process failing the same way each time) give the connection up.
        """
        if self._pumping or self._retrying:
            return
        self._pumping = True
        try:
            errors = 0
            while True:
                try:
                    self.bridge.pump()
                except UnitError as exc:
                    if exc.errno == errno.ENOTCONN:
                        raise  # closed: unloading
                    if exc.errno == errno.ECONNRESET:
                        if self._lost(exc):
                            continue  # what the new connection read meanwhile
                        return
                    errors = self._failed(errors, str(exc))
                except Exception as exc:
                    errors = self._failed(errors, repr(exc))
                else:
                    if self._lost_at is not None and self.bridge.subscribed:
                        self._alive()
                    self.sent()
                    return
        finally:
            self._pumping = False

    def _failed(self, errors, text):
        """Log one error of a pump; the count in a row after it (the MAX_ERRORS-th drops
        the connection: the next bridge.pump() raises ECONNRESET)."""
        self._log.error(f"bus: {text}")
        if errors + 1 < MAX_ERRORS:
            return errors + 1
        self._log.error(f"bus: {MAX_ERRORS} errors in a row, giving the connection up")
        self.bridge.drop()
        return 0

    def _lost(self, exc):
        """The connection is gone: re-open it at once if it had proved alive since the
        last loss (True if open again), else let the retry timer do it."""
        self._unwatch()
        if self._lost_at is not None:
            self._retry_later(exc)
            return False
        self._log.error("lost connection to systemd, reconnecting")
        self._lost_at = time.monotonic()
        return self._reconnect()

    def _retry_later(self, exc):
        if self._attempts % LOG_EVERY == 1:
            self._log.error(f"reconnect: {exc} (attempt {self._attempts}), retrying")
        self._retrying = True
        self._retry.reset(after=reconnect_delay(self._attempts))

    def _reconnect(self):
        """One attempt: open the bus again, without waiting for systemd. True if open."""
        self._retrying = False
        self._attempts += 1
        try:
            self.bridge.reconnect()
        except UnitError as exc:
            self._retry_later(exc)
            return False
        self._watch()
        self._on_reconnected()
        self.pump()  # when called by the retry timer (pump() is not re-entrant)
        return True

    def _alive(self):
        """systemd answered the new connection's Subscribe(): reconnected."""
        took = time.monotonic() - self._lost_at
        self._log.info(f"reconnected to systemd after {took * 1000:.0f} ms")
        self._lost_at = None
        self._attempts = 0
        self.reconnects += 1
