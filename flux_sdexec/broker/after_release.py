"""Exec requests waiting for their unit name, held by a record that is being let go.

A unit's name is its label's (naming.py), and a record whose status a wait has already
given keeps its unit loaded a little while (the answer grace, a revived record's hold,
the stop itself: waits.py). Its label is free at once for a new exec, as in flux-core's
C module: the old record is let go, and the new exec waits here, in start order, until
systemd has forgotten the old unit; then it starts. Each waiting request ends exactly
once: it starts (``proceed``, through ``serve``), or its client's disconnect or the
module's unload answers it with an error.

``Releases`` is the one place that decides when that is: a unit let go has up to two
references to drop, each by its own adapter and each maybe done at once, its hold
(holds.py: the Unref answered) and its keeper (keepers.py: stopped, the unit unloaded).
Both are counted before either is begun, and the name is free only once both are over, in
whichever order they end. Begun one after the other, the first one over (the hold of a unit
never held: at once) started the waiting exec before the keeper's StopUnit went out:
systemd refused the new unit (EEXIST), or that StopUnit stopped the new unit's keeper, of
the same name. No flux import: the service wires it.
"""

from flux_sdexec.broker.parked import ParkedRequests

HOLD, KEEPER = "hold", "keeper"  # the parts of a release (Releases)


class StartsAfterRelease(ParkedRequests):
    """The exec requests of one sdexec waiting for a unit name, parked by unit
    (``cancel`` and ``cancel_all`` answer them: parked.py).

    Args:
        serve: ``serve(msg, verb, func)`` runs ``func(msg)`` and turns an exception into
            the request's one error response (SdexecService.serve).
        respond_error: ``respond_error(msg, errnum, text)``.
        sender_of: the client uuid of a message.
    """

    def __init__(self, serve, respond_error, sender_of):
        super().__init__(respond_error, sender_of)
        self._serve = serve

    def wait(self, unit, msg, label, proceed):
        """Start ``proceed(msg)`` once ``unit`` is gone (``gone(unit)``)."""
        self.park(unit, msg, (label, proceed))

    def has(self, unit=None, label=None):
        """A request waits for ``unit``, or one labelled ``label`` waits."""
        if unit is not None and unit in self:
            return True
        return label is not None and any(parked == label for parked, _ in self.data())

    def released(self, unit):
        """``unit`` is released (systemd has forgotten it): the request waiting for it starts
        now."""
        entry = self.take(unit)
        if entry is not None:
            msg, (_, proceed) = entry
            self._serve(msg, "exec", proceed)


class Releases:
    """The units being released, until their name is free (module docstring).

    Args:
        on_free: ``on_free(unit)`` once every part is released (StartsAfterRelease.released).

    The owner sets ``holds`` (holds.Holds, whose ``on_released`` is ``hold_released``) and
    ``keepers`` (keepers.Keepers, whose ``on_gone`` is ``keeper_released``) before the first
    release. A hold lost with its connection is over once the unit is seen unloaded
    (``keepers.await_unload``, its KEEPER part).
    """

    def __init__(self, on_free):
        self._on_free = on_free
        self._left = {}  # unit -> the parts not over yet
        self.holds = self.keepers = None

    def pending(self, unit):
        """``unit`` is being let go: a start of its name must wait (``on_free``)."""
        return unit in self._left

    def release(self, unit, keeper=None):
        """Let ``unit`` go: drop its hold and stop its ``keeper`` (None: it has none)."""
        if unit in self._left:
            return
        self._left[unit] = {HOLD} if keeper is None else {HOLD, KEEPER}
        self.holds.release(unit)  # may be over at once
        if not self.holds.releasing(unit):
            self._part_released(unit, HOLD)
        if keeper is not None and unit in self._left:
            self.keepers.release(unit, keeper)  # may be over at once (a lost connection)
            if not self.keepers.stopping(unit):
                self._part_released(unit, KEEPER)

    def hold_released(self, unit, lost):
        """``unit``'s hold is released; ``lost``: with its connection, so systemd may have
        the unit loaded a little longer: the name waits until it is seen unloaded."""
        left = self._left.get(unit)
        if lost and left is not None and HOLD in left and KEEPER not in left:
            left.add(KEEPER)
            self.keepers.await_unload(unit)
            if not self.keepers.stopping(unit):
                left.discard(KEEPER)
        self._part_released(unit, HOLD)

    def keeper_released(self, unit):
        self._part_released(unit, KEEPER)

    def _part_released(self, unit, part):
        left = self._left.get(unit)
        if left is None or part not in left:
            return
        left.discard(part)
        if not left:
            del self._left[unit]
            self._on_free(unit)
