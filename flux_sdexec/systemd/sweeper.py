"""Units no exec will reap: stopped and reset until systemd has forgotten them.

A unit lands here when its exec failed while systemd may still have it (the budget ran
out: it may appear, or its start job may still be queued), or when a StopUnit or
ResetFailedUnit of a tracked unit was refused, lost with the connection or not answered.
Each round looks the unit up (GetUnit); while it is loaded, StopUnit in mode "replace"
(which cancels a queued start job, where "fail" is refused as destructive) and
ResetFailedUnit go out, and the next round follows after ``settle.sweep_delay``. Every
call has the per-call deadline; rounds go on until the unit is gone or the module
unloads, which then stops what is left as it does every unit (``close()``).
"""

import errno

from flux_sdexec.core import settle
from flux_sdexec.core.errors import UnitError


class Sweeper:
    """Args:
    bridge: the SystemdBridge.
    bus: its BusWatcher.
    watchers: a ``watchers.Watchers``.
    log: the module's BrokerLogger.
    deadline: a callable giving the per-call deadline in seconds.
    """

    def __init__(self, bridge, bus, watchers, log, deadline):
        self.bridge = bridge
        self.bus = bus
        self.watchers = watchers
        self.log = log
        self._deadline = deadline
        self._units = {}  # unit -> [rounds done, its timer]
        self._closed = False
        self.swept = 0  # units seen gone, for stats and tests

    def __contains__(self, unit):
        return unit in self._units

    def __len__(self):
        return len(self._units)

    def units(self):
        """The units still being swept."""
        return sorted(self._units)

    def sweep(self, unit, why):
        """Stop and reset ``unit`` until systemd has forgotten it."""
        if unit in self._units:
            return
        self.log.warning(f"{unit}: {why}; stopping it until systemd lets go")
        if self._closed:
            self._units[unit] = [0, None]
            return
        timer = self.watchers.timer(0, lambda: self._round(unit), f"sweep {unit}")
        self._units[unit] = [0, timer]
        self._round(unit)

    def _round(self, unit):
        self._send(self.bridge.get_unit, unit, lambda exc: self._looked_up(unit, exc))

    def _looked_up(self, unit, exc):
        entry = self._units.get(unit)
        if entry is None or self._closed:
            return
        if exc is not None and exc.errno == errno.ENOENT:
            self._drop(unit)
            self.log.info(f"{unit}: gone after {entry[0] + 1} rounds")
            return
        if exc is None:
            quiet = self._quiet(unit)
            self._send(self.bridge.stop_unit, unit, quiet, mode="replace")
            self._send(self.bridge.reset_failed_unit, unit, quiet)
        entry[1].reset(after=settle.sweep_delay(entry[0]))
        entry[0] += 1

    def _send(self, call, unit, on_reply, **kwargs):
        try:
            call(unit, on_reply=on_reply, timeout=self._deadline(), **kwargs)
        except UnitError as exc:  # lost or closed: the next round tries again
            on_reply(exc)
            return
        self.bus.sent()

    def _quiet(self, unit):
        def on_reply(exc):
            if exc is not None:
                self.log.debug(f"sweep {unit}: {exc}")

        return on_reply

    def _drop(self, unit):
        timer = self._units.pop(unit)[1]
        if timer is not None:
            timer.stop()
            timer.destroy()
        self.swept += 1

    def close(self):
        """Unloading: stop the rounds; return the units not yet gone (``take``)."""
        self._closed = True
        return self.take()

    def take(self):
        """The units it holds, forgotten: once closed, those swept since (no round stops
        them: the unload's last stop does)."""
        units = list(self._units)
        for unit in units:
            self._drop(unit)
        self.swept -= len(units)
        return units
