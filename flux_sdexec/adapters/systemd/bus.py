"""Watching the systemd bus on the reactor: pumping signals and replies, reconnecting.

``BusWatcher`` owns the fd watchers on the bridge's connection (POLLIN always,
POLLOUT while sd-bus has queued output) and the timer of the pending calls'
deadlines. ``pump()`` hands queued PropertiesChanged to their processes and
replies to their callers (call it after every blocking systemd call, see
bridge.py; call ``sent()`` after a call sent without waiting). A lost connection
is re-opened at once and, while that fails, retried with a growing pause
(``settle.reconnect_delay``: 20 ms doubling to 2 s, as a daemon-reexec takes ~100 ms);
then ``on_reconnected()`` lets the service catch up on every unit.
"""

import errno
import time

from flux.constants import FLUX_POLLIN, FLUX_POLLOUT

from flux_sdexec.adapters.watchers import guarded
from flux_sdexec.errors import UnitError
from flux_sdexec.settle import reconnect_delay

LOG_EVERY = 10  # a failed reconnect attempt is logged the first time and every tenth


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
        self._attempts = 0  # failed reconnect attempts since the connection was lost
        self._lost_at = None
        self._deadline = None  # when the deadline timer fires, None when not armed
        self._timer = watchers.timer(0, self._expire, "bus deadline")
        self._pumping = False
        self.reconnects = 0  # connections to systemd re-opened since load (stats-get)
        # called from the watchers and after every systemd call: never raises
        self.pump = guarded(log, "bus", self._pump)
        self._watch()

    def _watch(self):
        for w in (self._watcher, self._out):
            if w is not None:
                w.stop()
                w.destroy()
        fd = self.bridge.fileno()
        self._watcher = self._watchers.fd(fd, FLUX_POLLIN, self._pump, "bus")
        self._watcher.start()
        self._out = self._watchers.fd(fd, FLUX_POLLOUT, self._pump, "bus out")
        self._writing = False

    def sent(self):
        """A call went out without waiting: watch its deadline, and POLLOUT if sd-bus
        could not write it all."""
        deadline = self.bridge.next_deadline()
        if deadline is not None and (self._deadline is None or deadline < self._deadline):
            self._deadline = deadline
            self._timer.reset(after=max(0.0, deadline - time.monotonic()))
        writing = self.bridge.wants_write()
        if writing != self._writing:
            self._writing = writing
            (self._out.start if writing else self._out.stop)()

    def _expire(self):
        self._deadline = None
        self.bridge.expire()
        self.sent()

    def _pump(self):
        """Hand systemd's queued signals and replies on (not re-entrant).

        A callback that raises is logged and the pump goes on with the next message:
        messages sd-bus already read would not make the fd readable again.
        """
        if self._pumping:
            return
        self._pumping = True
        try:
            while True:
                try:
                    self.bridge.pump()
                    break
                except UnitError as exc:
                    if exc.errno == errno.ENOTCONN:
                        raise  # closed: unloading
                    if exc.errno == errno.ECONNRESET:
                        if not self._reconnect():
                            return
                        continue  # what the re-subscribe read meanwhile
                    self._log.error(f"bus: {exc}")
                except Exception as exc:
                    self._log.error(f"bus: {exc!r}")
            self.sent()
        finally:
            self._pumping = False

    def _reconnect(self):
        """Open the bus again; retry with a growing pause until it works. True if open."""
        if self._attempts == 0:
            self._log.error("lost connection to systemd, reconnecting")
            self._lost_at = time.monotonic()
            self._watcher.stop()
            self._out.stop()
        try:
            self.bridge.reconnect()
        except UnitError as exc:
            self._attempts += 1
            delay = reconnect_delay(self._attempts)
            if self._attempts % LOG_EVERY == 1:
                self._log.error(f"reconnect: {exc} (attempt {self._attempts}), retrying")
            self._retry.reset(after=delay)
            return False
        took = time.monotonic() - self._lost_at
        self._log.info(f"reconnected to systemd after {took * 1000:.0f} ms")
        self._attempts = 0
        self.reconnects += 1
        self._watch()
        self._on_reconnected()
        self.pump()  # when called by the retry timer (pump() is not re-entrant)
        return True
