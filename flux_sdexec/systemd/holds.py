"""References (Unit.Ref) that keep sdexec's waitable units loaded after they end.

A unit whose main process sent STOPPING=1 (the IMP of a multi-user job) ends inactive,
not "exited", and systemd unloads an inactive unit at once, exit status included, unless
something refers to it. sdexec refers to every unit it may hand over, from the moment
its process is reported until its record goes. systemd keeps a unit a bus client has
Ref'd loaded until that client's Unref or until its connection closes. The manager's
private socket carries no sender name, so Ref is refused there (EINVAL): the references
go over the bus, on a connection of their own. The unload closes it only once the guard
unit, whose After= refers to the handed-over units, is loaded; the next sdexec takes its
references before it stops the guard. A watcher drains the connection; when it is lost
(a bus restart), every hold is taken again at once on a new one.

The release (Unref) is sent without waiting, and the reactor goes on. Its unit is
*releasing* until systemd has collected it: the Unref's answer goes out before systemd
drops the reference (sd-bus dispatches a reference dropped before the next message of the
same connection), and its loop runs the GC queue between messages, so a GetUnit sent after
the answer, on this connection, is answered once the unreferenced unit is gone; then a
start of the same name (a label reused, on the other connection: the private socket)
cannot find the old unit loaded. ``on_released(unit, lost)`` says so; a start of a releasing
unit's name waits for it (after_release.py). A release that ends with its connection closed
(lost, replaced, or the unload's) is ``lost``: the reference goes once systemd learns the
connection is gone, which no answer on another connection orders; whoever waits for the
name then looks the unit up until systemd has unloaded it (keepers.py await_unload).

An answer not in after UNREF_TIMEOUT (for both calls) means a slow bus: the holds move to a
new connection. The old one stays open, unread, until the new one's Refs are all answered
and taken, and only then is closed (unflushed: a stalled bus is never waited for), which
drops its references, the late Unref's included: at no moment is a held unit without a
reference (closing first let systemd collect an ended unit before the new Ref reached it).
The releases sent on the old connection are done once it is closed; so is one done on the
new connection meanwhile (the old one may still refer to its unit). While an old connection
is open only a Ref not taken on the new one (below) starts another move, the old ones kept,
so their number stays bounded (MOVES_MAX). A connection that failed (a bus restart) has no
reference left to keep: it is closed at once and the holds taken again.

A daemon-reexec leaves the connection up, and systemd keeps its references through it, but a
Ref or Unref it read and did not answer before it re-executed, or sent while it is off the bus,
is answered by the bus daemon (NoReply, ServiceUnknown): whether systemd took it is unknown.
systemd counts the Refs of one connection (two need two Unrefs), so neither is sent again:
the unit stays held or releasing, and the holds move to a new connection as for a late answer
(an Unref by its UNREF_TIMEOUT, a Ref after MOVE_DELAY): the old connection's close drops
whatever it held, exactly once. Taking the Unref's answer for a release left the unit loaded
until sdexec closed its connections (units piling up under a storm of reexecs). After
MOVES_MAX moves in a row whose Refs were not taken either, the holds stay put (the old
connections closed) until systemd takes a Ref again.
"""

import errno

from flux.constants import FLUX_POLLIN

from flux_sdexec.systemd import sdbus
from flux_sdexec.systemd.connect import MANAGER, MANAGER_PATH
from flux_sdexec.systemd.sdbus import append

SYSTEMD = b"org.freedesktop.systemd1"
UNIT_PREFIX = b"/org/freedesktop/systemd1/unit"
UNIT = b"org.freedesktop.systemd1.Unit"
LOST = sdbus.DISCONNECTED | {errno.ETIMEDOUT}  # else an answer of systemd's
WAIT_USEC = 1_000_000  # a call awaited: systemd answers at once; a stalled bus costs this once
UNREF_TIMEOUT = 1.0  # seconds for systemd's answer to an Unref before the holds move
# the bus daemon's answers for systemd (NoReply, ServiceUnknown, NameHasNoOwner): a reexec
NOT_TAKEN = frozenset((errno.ETIMEDOUT, errno.EHOSTUNREACH, errno.ENXIO))
MOVE_DELAY = 1.0  # seconds after a Ref not taken before the holds move (systemd back by then)
MOVES_MAX = 20  # moves in a row whose Refs were not taken either, then the holds stay put
# (the old connections closed) until systemd takes a Ref again


class Holds:
    """The references of one sdexec. A lost connection loses them: the watcher (else the
    next call) opens another and takes them all again; a slow one is kept until they are."""

    def __init__(self, log, watchers=None, user_mode=True, on_released=None):
        self._log = log
        self._watchers = watchers  # broker.watchers.Watchers; None: Unref awaited, no reactor
        self._watcher = None
        self._on_released = on_released or (lambda unit, lost: None)
        self._releasing = {}  # unit -> its UNREF_TIMEOUT timer (None without watchers)
        self._released = []  # (unit, lost) of releases done, their on_released not yet called
        self._user_mode = user_mode
        self._bus = None
        self._olds = []  # the connections replaced, open until _bus's Refs are answered, taken
        self._confirming = set()  # cookies of the Refs _open sent on _bus, not answered yet
        self._after_old = set()  # releasing units done but for the references of _olds
        self._errors = {}  # cookie -> (member, unit), for the calls sent without waiting
        self.held = set()
        self._handing_over = False
        self._move_timer = None  # armed by a Ref not taken (_not_taken)
        self._moves = 0  # moves in a row whose new connection had a Ref not taken too
        self._untaken = False  # a Ref on _bus was not taken

    def hold(self, unit, wait=False):
        """Ref ``unit``; ``wait``: see systemd answer (adoption, before the guard stops)."""
        if unit not in self.held:
            self.held.add(unit)  # first: a refusal read while sending takes it out
            if not self._send(b"Ref", unit, wait):
                self.held.discard(unit)
            self._notify()  # a release answered (or a connection lost) meanwhile

    def release(self, unit):
        """Unref ``unit`` (its record is gone), without waiting (see the module docstring);
        ``on_released(unit, lost)`` follows (at once when no answer is awaited: ``releasing(unit)``
        False on return). A unit not held has nothing to release: no on_released."""
        if unit in self._releasing or unit not in self.held:
            return
        self._releasing[unit] = None
        if not self._handing_over:
            self.held.discard(unit)
            if self._bus is not None and self._unref(unit):
                self._notify()
                return
        if unit in self._releasing and unit not in self._after_old:
            # nothing left to wait for here
            self._connection_done(unit, certain=self._bus is not None)
        self._notify()

    def _unref(self, unit):
        """Send the Unref; True while its answer (or the GetUnit's after it) is awaited,
        UNREF_TIMEOUT armed; False once done, refused, or moved to another connection."""
        wait = self._watchers is None
        sent = self._send(b"Unref", unit, wait)
        if not sent or unit not in self._releasing or unit in self._after_old:
            return False
        if wait:
            if self._bus is not None:
                self._look(unit, wait=True)
            return False
        timer = self._watchers.timer(UNREF_TIMEOUT, lambda: self._late(unit), "holds")
        self._releasing[unit] = timer
        timer.start()
        return True

    def releasing(self, unit):
        """An Unref of ``unit`` is not answered yet: a start of its name must wait."""
        return unit in self._releasing

    def hand_over(self):
        """The unload begins: every reference stays until close(), the guard loaded."""
        self._handing_over = True

    def close(self):
        """Drop every reference (the connection goes), after the guard took the units."""
        self._drop()
        self.held.clear()

    def _drop(self):
        """Close the connections, unflushed (never waiting for a stalled bus): every reference
        they held goes, releases in flight too."""
        self._stop_watcher()
        if self._move_timer is not None:
            self._move_timer.stop()
            self._move_timer.destroy()
            self._move_timer = None
        for bus in [self._bus, *self._olds]:
            if bus is not None:
                bus.close(flush=False)  # nothing queued matters: closing drops it all
        self._bus, self._olds = None, []
        self._confirming.clear()
        for unit in list(self._releasing):
            self._done(unit)

    def _stop_watcher(self):
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher.destroy()  # else the flux handle keeps it referenced
            self._watcher = None

    def _connection_done(self, unit, certain=False):
        """The connection ``unit``'s Unref went on is done with it: released, unless an old
        connection still open (see the module docstring) may refer to it too. ``certain``:
        systemd said so on a connection that stays (else the release is lost)."""
        if not self._olds:
            self._done(unit, certain)
            return
        timer, self._releasing[unit] = self._releasing[unit], None
        if timer is not None:
            timer.stop()
            timer.destroy()
        self._after_old.add(unit)

    def _done(self, unit, certain=False):
        """sdexec's reference to ``unit`` is dropped (``certain``: systemd said it has
        collected the unit, if nothing else refers to it): on_released is due."""
        timer = self._releasing.pop(unit, None)
        if timer is not None:
            timer.stop()
            timer.destroy()
        self._after_old.discard(unit)
        self._released.append((unit, not certain))

    def _notify(self):
        """Call on_released for the releases done, outside any read of the connection."""
        while self._released:
            self._on_released(*self._released.pop(0))

    def _late(self, unit):
        why = f"{unit}: Unref not answered in {UNREF_TIMEOUT:g}s"
        self._move_holds(self._releasing[unit], UNREF_TIMEOUT, why, wait=bool(self._olds))

    def _not_taken(self, member, unit, text):
        """systemd did not answer ``member`` for ``unit`` before it re-executed: see the
        module docstring. An Unref's UNREF_TIMEOUT moves the holds; a Ref arms the move."""
        self._log.debug(f"{unit}: {member.decode()} not taken by systemd: {text}")
        if member == b"Ref" and self._watchers is not None:
            self._untaken = True
            if self._moves >= MOVES_MAX:
                self._log.error(
                    f"units held: systemd took no Ref on {MOVES_MAX} connections in a row:"
                    " units may stay loaded until sdexec unloads"
                )
                return
            if self._move_timer is None:
                self._move_timer = self._watchers.timer(MOVE_DELAY, self._move, "holds")
            self._move_timer.reset(after=MOVE_DELAY)

    def _move(self):
        """A Ref not taken: the holds move, from a move under way too when that Ref was on
        its new connection (which is then never sure to refer to the unit)."""
        wait = bool(self._olds) and not self._untaken  # the move under way may still end
        if not wait:
            self._moves += 1
        self._move_holds(self._move_timer, MOVE_DELAY, "units held: a Ref not taken (reexec)", wait)

    def _move_holds(self, timer, after, why, wait):
        """Take every hold again on a new connection, the current one kept open (with any
        older one) until the new Refs are answered and taken; ``wait``: a move is under way,
        and ``timer`` tries again in ``after`` seconds instead."""
        if wait:
            timer.reset(after=after)
            return
        self._log.warning(f"{why}: reconnecting")
        self._reconnect("every unit held", lost=False)
        self._notify()

    def _reconnect(self, unit, lost, skip=None):
        """Take every hold but ``skip`` again on a new connection. One ``lost`` is closed (its
        references went with it); a slow one stays open as an old connection until the new
        one's Refs are answered and taken (``_confirmed``). The releases in flight are over
        with it."""
        self._stop_watcher()
        if lost:
            self._bus.close(flush=False)
        else:
            self._olds.append(self._bus)
        self._bus = None
        for other in list(self._releasing):
            if other not in self._after_old:
                self._connection_done(other)
        return self._open(unit, skip)

    def _confirmed(self):
        """Every Ref of the new connection is answered and taken: the old connections go,
        and with them the releases that waited for them. One not taken keeps them for the
        next move; after MOVES_MAX such moves in a row, the holds stay put."""
        if not self._olds or self._confirming:
            return
        if self._untaken and self._moves < MOVES_MAX:
            return
        for old in self._olds:
            old.close(flush=False)
        self._olds = []
        if not self._untaken:
            self._moves = 0
        for unit in list(self._after_old):
            self._done(unit)

    def _readable(self):
        try:
            self._drain()
        except OSError as exc:
            self._log.warning(f"units held: connection lost ({exc}): taking every hold again")
            self._reconnect("every unit held", lost=True)
        self._notify()

    def _send(self, member, unit, wait, again=True):
        """Send ``member`` for ``unit``; False if it was not sent or systemd refused it."""
        skip = unit if member == b"Ref" else None  # sent below, awaited if asked
        if self._bus is None and not self._open(unit, skip):
            return False
        try:
            m = self._call(member, unit)
            if wait:
                self._bus.call(m, WAIT_USEC)
            else:
                cookie = self._bus.send(m)
                self._errors[cookie] = (member, unit)
                if member == b"Ref" and self._olds:
                    self._confirming.add(cookie)  # the old connections may refer to it
            self._drain()
            return True
        except OSError as exc:
            if exc.errno not in LOST:  # the unit went before it was held
                self._log.debug(f"{unit}: {member.decode()} refused: {exc}")
                return False
            if exc.errno == errno.ETIMEDOUT and self._olds:
                return True  # sent on the new connection, as slow: the old ones stay
            self._log.warning(f"{unit}: {member.decode()}: {exc}: taking every hold again")
            lost = exc.errno != errno.ETIMEDOUT
            if self._reconnect(unit, lost, skip) and member == b"Ref" and again:
                return self._send(member, unit, wait, again=False)
            self._confirmed()
            return False

    def _open(self, unit, skip=None):
        """A new connection, every unit held but ``skip`` Ref'd on it again; False if none.
        With no Ref to wait for (``skip`` is sent next by the caller), an old connection
        goes at once."""
        self._errors.clear()
        self._confirming.clear()
        self._untaken = False
        try:
            self._bus = sdbus.Bus(self._user_mode)
            for other in self.held - {skip}:
                cookie = self._bus.send(self._call(b"Ref", other))
                self._errors[cookie] = (b"Ref", other)
                self._confirming.add(cookie)
            if self._watchers is not None:
                fd = self._bus.fileno()
                self._watcher = self._watchers.fd(fd, FLUX_POLLIN, self._readable, "holds")
                self._watcher.start()
        except OSError as exc:
            self._log.error(f"{unit}: no bus to hold units on ({exc}): they go once ended")
            self._drop()
            return False
        if skip is None:
            self._confirmed()
        return True

    def _look(self, unit, wait=False):
        """GetUnit(unit) on this connection: answered once the Unref before it took effect."""
        m = self._bus.new_call(SYSTEMD, MANAGER_PATH, MANAGER, b"GetUnit")
        append(m, b"s", unit)
        if wait:
            try:
                self._bus.call(m, WAIT_USEC)
            except OSError:
                pass  # the unit is not loaded (the answer looked for), or the bus is gone
        else:
            self._errors[self._bus.send(m)] = (b"GetUnit", unit)

    def _call(self, member, unit):
        path = sdbus.path_encode(UNIT_PREFIX, unit)
        return self._bus.new_call(SYSTEMD, path, UNIT, member)

    def _drain(self):
        """Read what came back. A refused Ref (the unit ended and went before systemd read
        it: sdexec saw its end on its own connection) leaves nothing to Unref."""
        while True:
            r, m, kind, cookie = self._bus.process()
            if m != sdbus.ffi.NULL:
                self._confirming.discard(cookie)
                member, unit = self._errors.pop(cookie, (None, None))
                errnum, text = sdbus.reply_error(m) if kind == sdbus.METHOD_ERROR else (None, "")
                if errnum in NOT_TAKEN and member in (b"Ref", b"Unref"):
                    self._not_taken(member, unit, text)
                elif member == b"Ref" and errnum is not None:
                    self.held.discard(unit)
                    self._log.debug(f"{unit}: Ref refused: {text}")
                elif member == b"Ref" and not self._olds:
                    self._moves = 0  # systemd takes Refs again: a later reexec moves the holds
                elif member == b"Unref" and unit in self._releasing:
                    self._look(unit)  # answered before the reference was dropped
                elif member == b"GetUnit" and unit in self._releasing:
                    # collected if unreferenced; not seen when systemd re-executed meanwhile
                    self._connection_done(unit, certain=errnum not in NOT_TAKEN)
                sdbus.lib.sd_bus_message_unref(m)
            if r <= 0:
                self._confirmed()
                return
