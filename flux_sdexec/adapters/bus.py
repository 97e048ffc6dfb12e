"""Watching the systemd bus on the reactor: pumping signals, reconnecting.

``BusWatcher`` owns the fd watcher on the bridge's connection. ``pump()`` hands
queued PropertiesChanged to their processes (call it after every systemd call:
see adapters/systemd.py); a lost connection is re-opened, retried each second,
and then ``on_reconnected()`` lets the service catch up on every unit.
"""

import errno

from flux.constants import FLUX_POLLIN

from flux_sdexec.adapters.watchers import guarded
from flux_sdexec.errors import UnitError

RETRY_SEC = 1.0


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
        self._watcher = None
        self._retry = None
        self._pumping = False
        # called from the watcher and after every systemd call: never raises
        self.pump = guarded(log, "bus", self._pump)
        self._watch()

    def _watch(self):
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher.destroy()
        self._watcher = self._watchers.fd(self.bridge.fileno(), FLUX_POLLIN, self._pump, "bus")
        self._watcher.start()

    def _pump(self):
        """Hand systemd's queued signals to their processes (not re-entrant)."""
        if self._pumping:
            return
        self._pumping = True
        try:
            self.bridge.pump()
        except UnitError as exc:
            if exc.errno != errno.ECONNRESET:
                raise
            self._reconnect()
        finally:
            self._pumping = False

    def _reconnect(self):
        """Open the bus again; retry each second until it works."""
        self._log.error("lost connection to systemd, reconnecting")
        self._watcher.stop()
        try:
            self.bridge.reconnect()
        except UnitError as exc:
            self._log.error(f"reconnect: {exc}, retrying in {RETRY_SEC:g}s")
            self._retry = self._watchers.timer(RETRY_SEC, self._reconnect, "reconnect")
            self._retry.start()
            return
        self._watch()
        self._on_reconnected()
