"""After a reconnect: what every tracked unit is now, read without blocking the reactor.

Signals sent while the connection was down are lost, so each tracked unit is read again
(``bridge.read_unit``: GetAll on the hot connection, answered in order with its signals)
and fed as one UnitChanged, marked ``reread``: what happened in the gap is known only from
what the read says (whether the unit was ever active: its ActiveEnterTimestamp). The calls
whose reply was lost look their unit up first (calls.py): on the same connection those
GetUnit are answered before the reads, so the "not-found" stub a read of a missing unit
loads cannot pass for the unit.

One rule for a unit systemd answers "not-found": while its start has not settled, systemd
may not have it yet (the start's lookup sends it again, and its signals follow): ignored.
Otherwise systemd stopped and forgot it, its last signals lost with the connection (a
StopUnit or a release, then a daemon-reexec): fed as gone (unitstate.py), so that the
process ends instead of waiting for a signal that cannot come. A unit that was running
(its exit not known) is one a restarted manager no longer has: ``lost(p)`` has its
processes, now outside any manager, get the unit's stop signal, and ends its exec with an
error saying so (ECONNRESET).

A read not answered within the call deadline (a stalled systemd) is sent again; one lost
with the connection is read again by the next reconnect's catch-up.
"""

import errno

from flux_sdexec.core.errors import UnitError
from flux_sdexec.core.events import UnitChanged


class CatchUp:
    """``catch_up()`` is the BusWatcher's ``on_reconnected``.

    Args:
        bridge: the SystemdBridge.
        registry: the tracked SdProcs.
        calls: the Calls (``reconnected()``, ``start_unsettled(unit)``).
        feed: ``feed(p, input)``, the service's one way into a process.
        lost: ``lost(p)``, for a running process whose unit the manager no longer has.
        log: the module's BrokerLogger.
        deadline: a callable giving the per-call deadline in seconds.
    """

    def __init__(self, bridge, registry, calls, feed, lost, log, deadline):
        self.bridge = bridge
        self.registry = registry
        self.calls = calls
        self.feed = feed
        self.lost = lost
        self.log = log
        self.deadline = deadline

    def catch_up(self):
        self.calls.reconnected()
        for p in list(self.registry):
            self.read(p)

    def read(self, p):
        """Read ``p``'s unit on the hot connection and feed what it says (``_got``)."""
        try:
            self.bridge.read_unit(p.unit.name, lambda *a: self._got(p, *a), self.deadline())
        except UnitError as exc:  # lost again: the next reconnect reads it
            self.log.debug(f"{p.unit.name}: catch-up: {exc}")

    def _got(self, p, exc, props=None):
        unit = p.unit.name
        if self.registry.by_unit(unit) is not p:
            return  # over meanwhile
        if exc is not None:
            if exc.errno == errno.ETIMEDOUT:
                self.log.warning(f"{unit}: catch-up: no answer within the deadline, again")
                self.read(p)
            elif exc.errno != errno.ECONNRESET:
                self.log.error(f"{unit}: catch-up: {exc}")
            return
        if props.get("LoadState") == "not-found":
            if self.calls.start_unsettled(unit):
                return
            if p.pid > 0 and p.unit.code is None:
                self.lost(p)
                return
        self.feed(p, UnitChanged(props, reread=True))
