"""Keepers: slices that keep a unit loaded, exit status included, through a bus loss.

A unit whose main process sent STOPPING=1 (the IMP of a multi-user job: Type=notify) ends
inactive, and systemd unloads an inactive unit as soon as nothing refers to it. Where
sdexec takes its units' signals over the bus (brokers sharing the manager, unitsignals.py)
and refers to them by Unit.Ref over the bus (holds.py), a killed bus drops both: a unit
ending before sdexec is back on the bus was gone, exit status and all, and its exec could
only fail. (Over the private socket a bus loss drops no signal: no keeper there.)

So such a unit starts with a keeper: a slice of its own with no process, created in the
same StartTransientUnit (an auxiliary unit) and started with it (the unit Wants= it). Its
PartOf= on the unit is a reference systemd keeps without any bus, and makes every stop of
the unit stop the keeper too (sdexec's own stops, the sweeper's, the unload's). A unit that
ends by itself is kept until sdexec is done with it (its record goes): ``release`` stops
the keeper, and systemd unloads both. The unit's name is not free for a new start until
systemd has unloaded it: ``stopping(unit)`` until ``on_gone(unit)`` (after_release.Releases
frees the name once the unit's hold is released too). Only systemd's "not loaded" says so: a
keeper whose stop fails goes to the sweeper and its unit is looked up until unloaded, and a
look lost with the connection is tried again (a start of the name sent meanwhile, lost in turn,
would find the old unit at its reconnect and take it for its own). A keeper outlives an unload
that hands its unit over (``hand_over``), and a crash: the next sdexec adopts the unit, finds
its keeper among its Wants= (``keeper_of``), and releases it in turn. A unit still running
when its record goes (abandoned) runs on: its keeper goes.
"""

import errno

from flux_sdexec.core import settle
from flux_sdexec.core.naming import slice_escape, slice_unescape, UNIT_NAME_MAX
from flux_sdexec.core.errors import UnitError

NOTIFY_TYPES = ("notify", "notify-reload")  # the types whose main process may send STOPPING=1
LOOK_INTERVAL = 0.02  # seconds between looks for the unit, once its keeper is stopped
LOOKS_MAX = 250  # looks (5 s) for the unit, then its name is taken as free
LOST_LOOKS_MAX = 150  # looks lost with systemd (about 5 min), then the name is taken as free


def keeper_name(unit):
    """The keeper slice of ``unit``: its name without ``.service``, escaped, ``.slice``
    (``a-1:sys.service``: ``a\\x2d1:sys.slice``); None when longer than systemd allows."""
    base = unit[: -len(".service")] if unit.endswith(".service") else unit
    name = slice_escape(base) + ".slice"
    return name if len(name) <= UNIT_NAME_MAX else None


def keeper_unit(name):
    """The unit keeper ``name`` was made for (``keeper_name``'s inverse), or None when
    ``name`` is no keeper's."""
    if not name.endswith(".slice"):
        return None
    unit = slice_unescape(name[: -len(".slice")]) + ".service"
    return unit if keeper_name(unit) == name else None


def with_keeper(unit, props):
    """(props, aux, keeper): a unit of a notify type gets a keeper (Wants= it; ``aux``,
    StartTransientUnit's auxiliary units, creates it); any other unit none (keeper None)."""
    types = [value for name, _, value in props if name == "Type"]  # the last one counts
    keeper = keeper_name(unit) if types and types[-1] in NOTIFY_TYPES else None
    if keeper is None:
        return props, [], None
    aux = [(keeper, [("PartOf", ("as", [unit])), ("Description", ("s", f"keeps {unit}"))])]
    return props + [("Wants", "as", [keeper])], aux, keeper


def keeper_of(unit, props):
    """The keeper an adopted ``unit`` was started with (its Wants=), or None."""
    keeper = keeper_name(unit)
    return keeper if keeper is not None and keeper in (props.get("Wants") or ()) else None


class _Looks:
    """The looks for one unit until systemd has unloaded it."""

    __slots__ = ("keeper", "loaded", "lost", "timer")

    def __init__(self, keeper):
        self.keeper = keeper  # its keeper, being stopped (None: only looked for)
        self.loaded = 0  # looks that found it loaded
        self.lost = 0  # looks lost with systemd
        self.timer = None  # the timer of the next look


class Keepers:
    """The keepers being released, until systemd has unloaded their units.

    Args:
        bridge: the SystemdBridge; bus: its BusWatcher; watchers: a ``watchers.Watchers``.
        sweeper: the Sweeper, for a keeper whose stop failed.
        log: the module's BrokerLogger.
        deadline: a callable giving the per-call deadline in seconds.
        on_gone: ``on_gone(unit)`` once systemd has unloaded the unit (Releases.keeper_released).
    """

    def __init__(self, bridge, bus, watchers, sweeper, log, deadline, on_gone):
        self.bridge = bridge
        self.bus = bus
        self.watchers = watchers
        self.sweeper = sweeper
        self.log = log
        self._deadline = deadline
        self._on_gone = on_gone
        self._of = {}  # unit -> its keeper, from its start (or adoption) until its release
        self._stopping = {}  # unit -> its _Looks, until systemd has unloaded it
        self._kept = set()  # units the unload hands over with their keepers

    def record(self, unit, keeper):
        """``unit`` was started (or adopted) with ``keeper`` (None: it has none)."""
        if keeper is not None:
            self._of[unit] = keeper

    def pop(self, unit):
        """``unit``'s record goes: its keeper (None: it has none), to release."""
        return self._of.pop(unit, None)

    def known(self):
        """The keepers of the units tracked."""
        return set(self._of.values())

    def stopping(self, unit):
        """``unit``'s keeper is being stopped: systemd may still have the unit loaded."""
        return unit in self._stopping

    def hand_over(self, units):
        """The unload leaves ``units`` to the next sdexec: their keepers stay."""
        self._kept = set(units)

    def release(self, unit, keeper):
        """Stop ``keeper``, then look ``unit`` up until systemd has unloaded it."""
        if unit in self._stopping or unit in self._kept:
            return
        self._stopping[unit] = _Looks(keeper)
        self._send(self.bridge.stop_unit, keeper, lambda exc: self._stopped(unit, exc))

    def await_unload(self, unit):
        """Look ``unit`` up until systemd has unloaded it (its hold went with a lost
        connection: systemd drops the reference when it learns of the loss)."""
        if unit in self._stopping or unit in self._kept:
            return
        self._stopping[unit] = _Looks(None)
        self._look(unit)

    def _stopped(self, unit, exc):
        if unit not in self._stopping:
            return
        if exc is not None and exc.errno != errno.ENOENT:
            self.sweeper.sweep(self._stopping[unit].keeper, f"stop: {exc}")  # stopped in rounds
        self._look(unit)

    def _look(self, unit):
        self._send(self.bridge.get_unit, unit, lambda exc: self._looked(unit, exc))

    def _looked(self, unit, exc):
        """The name is free once systemd says the unit is not loaded. A look lost with
        systemd says nothing: looked again after a pause (settle.reconnect_delay)."""
        entry = self._stopping.get(unit)
        if entry is None:
            return
        if exc is not None and exc.errno in settle.UNKNOWN and entry.lost < LOST_LOOKS_MAX:
            entry.lost += 1
            self._look_again(unit, settle.reconnect_delay(entry.lost))
        elif exc is not None or entry.loaded >= LOOKS_MAX:
            if exc is None or exc.errno != errno.ENOENT:  # running on, or systemd not there
                self.log.info(
                    f"{unit}: still loaded after its keeper stopped ({exc or 'no error'})"
                )
            self._done(unit)
        else:
            entry.loaded += 1
            self._look_again(unit, LOOK_INTERVAL)

    def _look_again(self, unit, after):
        entry = self._stopping[unit]
        if entry.timer is None:
            entry.timer = self.watchers.timer(after, lambda: self._look(unit), unit)
        entry.timer.reset(after=after)

    def _done(self, unit):
        timer = self._stopping.pop(unit).timer
        if timer is not None:
            timer.stop()
            timer.destroy()
        self._on_gone(unit)

    def _send(self, call, unit, on_reply):
        try:
            call(unit, on_reply=on_reply, timeout=self._deadline())
        except UnitError as exc:  # lost: on_reply decides
            on_reply(exc)
            return
        self.bus.sent()

    def close(self):
        """Unloading: stop looking (the keepers' stops were sent; the unload stops the rest)."""
        for unit in list(self._stopping):
            timer = self._stopping.pop(unit).timer
            if timer is not None:
                timer.stop()
                timer.destroy()
