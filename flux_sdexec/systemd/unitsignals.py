"""Which units' PropertiesChanged signals reach the module.

systemd sends every subscribed client the signals of every unit of the manager. Over
the bus, the bus daemon filters: one match rule per watched unit's object path, so the
module is never woken for the units of other brokers sharing the manager (measured, see
doc/dev/performance.md). Each rule is sent without waiting, before the unit's
StartTransientUnit on the same connection, so the daemon has it before systemd can
signal the unit. A direct connection to the private socket gets everything unasked:
one rule matches all, and the bridge drops what is not a watched unit's in Python.
``untracked`` counts the signals of units never watched that reached Python (on the bus:
the daemon's NameAcquired, once per connection), ``late`` those of units released
recently (their last signals, sent before the daemon took the RemoveMatch).
"""

from collections import OrderedDict

from flux_sdexec.systemd.sdbus import DISCONNECTED
from flux_sdexec.core.errors import UnitError

SIGNAL_MATCH = (
    b"type='signal',sender='org.freedesktop.systemd1',"
    b"interface='org.freedesktop.DBus.Properties',member='PropertiesChanged'"
)


def unit_match(path):
    """The match rule of one unit's PropertiesChanged (``path``: its object path, bytes)."""
    return SIGNAL_MATCH + b",path='" + path + b"'"


RELEASED_MAX = 1024  # how many released units' signals count as late, not untracked


class UnitSignals:
    """The signal matches of the bridge's connection (re-made by attach() after a reconnect).

    Args:
        shared: other brokers share the manager: connect over the bus first (connect.py).
    """

    def __init__(self, shared=False):
        self.shared = shared
        self._paths = set()  # the watched units' object paths
        self.untracked = 0
        self.late = 0
        self._released = OrderedDict()  # object paths of the units released last
        self._bus = None
        self._slots = None  # path -> slot, when the bus daemon filters per unit

    def attach(self, bus, per_unit):
        """Install the matches on a new connection ``bus``: one per watched unit (per_unit:
        a bus, whose daemon filters), else the one that matches all."""
        self._bus = bus
        if per_unit:
            self._slots = {}
            for path in self._paths:
                self._match(path)
        else:
            self._slots = None
            bus.add_match(SIGNAL_MATCH)

    def detach(self):
        """Forget the connection (its close() drops its matches)."""
        self._bus = None
        self._slots = None

    def add(self, path):
        """A unit is watched: let its signals through."""
        self._paths.add(path)
        self._released.pop(path, None)
        self._match(path)

    def _match(self, path):
        if self._slots is not None and path not in self._slots:
            try:
                self._slots[path] = self._bus.add_match(unit_match(path), wait=False)
            except OSError as exc:
                if exc.errno not in DISCONNECTED:  # else the reconnect's attach() adds it
                    raise UnitError(exc.errno, f"cannot watch the unit: {exc.strerror}") from None

    def remove(self, path):
        """A unit is no longer watched: stop its signals."""
        self._paths.discard(path)
        self._released[path] = None
        if len(self._released) > RELEASED_MAX:
            self._released.popitem(last=False)
        if self._slots is not None and path in self._slots:
            self._bus.remove_match(self._slots.pop(path))

    @property
    def over_bus(self):
        """The signals come through the bus daemon: a bus loss loses them (keepers.py)."""
        return self._slots is not None

    def unwatched(self, path):
        """Count a signal that is not a watched unit's (``path``: its object path or None)."""
        if path in self._released:
            self.late += 1
        else:
            self.untracked += 1

    def stats(self):
        return {
            "filter": "per-unit" if self._slots is not None else "all",
            "untracked": self.untracked,
            "late": self.late,
        }
