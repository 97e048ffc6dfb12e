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
cannot find the old unit loaded. ``on_released(unit)`` says so; a start of a releasing
unit's name waits for it (after_release.py). An answer not in after UNREF_TIMEOUT (for
both calls) counts as a lost connection: it is
closed (unflushed: a stalled bus is never waited for), which drops every reference, and
opened again with the remaining holds.
"""

import errno

from flux.constants import FLUX_POLLIN

from flux_sdexec.adapters.systemd import sdbus
from flux_sdexec.adapters.systemd.connect import MANAGER, MANAGER_PATH
from flux_sdexec.adapters.systemd.sdbus_append import append

SYSTEMD = b"org.freedesktop.systemd1"
UNIT_PREFIX = b"/org/freedesktop/systemd1/unit"
UNIT = b"org.freedesktop.systemd1.Unit"
LOST = sdbus.DISCONNECTED | {errno.ETIMEDOUT}  # else an answer of systemd's
WAIT_USEC = 1_000_000  # a call awaited: systemd answers at once; a stalled bus costs this once
UNREF_TIMEOUT = 1.0  # seconds for systemd's answer to an Unref before the connection is lost


class Holds:
    """The references of one sdexec. A lost connection loses them: the watcher (else the
    next call) opens another and takes them all again."""

    def __init__(self, log, watchers=None, user_mode=True, on_released=None):
        self._log = log
        self._watchers = watchers  # adapters.watchers.Watchers; None: Unref awaited, no reactor
        self._watcher = None
        self._on_released = on_released or (lambda unit: None)
        self._releasing = {}  # unit -> its UNREF_TIMEOUT timer (None without watchers)
        self._released = []  # releases answered, their on_released not yet called
        self._user_mode = user_mode
        self._bus = None
        self._errors = {}  # cookie -> (member, unit), for the calls sent without waiting
        self.held = set()
        self._handing_over = False

    def hold(self, unit, wait=False):
        """Ref ``unit``; ``wait``: see systemd answer (adoption, before the guard stops)."""
        if unit not in self.held:
            self.held.add(unit)  # first: a refusal read while sending takes it out
            if not self._send(b"Ref", unit, wait):
                self.held.discard(unit)
            self._notify()  # a release answered (or a connection lost) meanwhile

    def release(self, unit):
        """Unref ``unit`` (its record is gone), without waiting (see the module docstring);
        ``on_released(unit)`` follows, at once when it was not held."""
        if unit in self._releasing:
            return
        self._releasing[unit] = None
        sent = False
        if unit in self.held and not self._handing_over:
            self.held.discard(unit)
            if self._bus is not None:  # else no reference is left to drop
                wait = self._watchers is None
                sent = self._send(b"Unref", unit, wait)
                if sent and wait and self._bus is not None:
                    self._look(unit, wait=True)
                sent = sent and not wait
        if sent and unit in self._releasing:  # not answered yet (nor the connection lost)
            timer = self._watchers.timer(UNREF_TIMEOUT, lambda: self._late(unit), "holds")
            self._releasing[unit] = timer
            timer.start()
            return
        if unit in self._releasing:
            self._done(unit)
        self._notify()

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
        """Close the connection, unflushed (never waiting for a stalled bus): every reference
        it held goes, releases in flight too."""
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None
        if self._bus is not None:
            self._bus.close(flush=False)  # nothing queued matters: closing drops it all
            self._bus = None
        for unit in list(self._releasing):
            self._done(unit)

    def _done(self, unit):
        """systemd has dropped sdexec's reference to ``unit``: on_released is due."""
        timer = self._releasing.pop(unit, None)
        if timer is not None:
            timer.stop()
            timer.destroy()
        self._released.append(unit)

    def _notify(self):
        """Call on_released for the releases done, outside any read of the connection."""
        while self._released:
            self._on_released(self._released.pop(0))

    def _late(self, unit):
        self._log.warning(f"{unit}: Unref not answered in {UNREF_TIMEOUT:g}s: reconnecting")
        self._drop()
        self._open("every unit held")
        self._notify()

    def _readable(self):
        try:
            self._drain()
        except OSError as exc:
            self._log.warning(f"units held: connection lost ({exc}): taking every hold again")
            self._drop()
            self._open("every unit held")
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
                self._errors[self._bus.send(m)] = (member, unit)
            self._drain()
            return True
        except OSError as exc:
            if exc.errno not in LOST:  # the unit went before it was held
                self._log.debug(f"{unit}: {member.decode()} refused: {exc}")
                return False
            self._log.warning(f"{unit}: {member.decode()}: {exc}: taking every hold again")
            self._drop()
            if self._open(unit, skip) and member == b"Ref" and again:
                return self._send(member, unit, wait, again=False)
            return False

    def _open(self, unit, skip=None):
        """A new connection, every unit held but ``skip`` Ref'd on it again; False if none."""
        self._errors.clear()
        try:
            self._bus = sdbus.Bus(self._user_mode)
            for other in self.held - {skip}:
                self._errors[self._bus.send(self._call(b"Ref", other))] = (b"Ref", other)
            if self._watchers is not None:
                fd = self._bus.fileno()
                self._watcher = self._watchers.fd(fd, FLUX_POLLIN, self._readable, "holds")
                self._watcher.start()
            return True
        except OSError as exc:
            self._log.error(f"{unit}: no bus to hold units on ({exc}): they go once ended")
            self._drop()
            return False

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
                member, unit = self._errors.pop(cookie, (None, None))
                if member == b"Ref" and kind == sdbus.METHOD_ERROR:
                    self.held.discard(unit)
                    self._log.debug(f"{unit}: Ref refused: {sdbus.reply_error(m)[1]}")
                elif member == b"Unref" and unit in self._releasing:
                    self._look(unit)  # answered before the reference was dropped
                elif member == b"GetUnit" and unit in self._releasing:
                    self._done(unit)  # systemd has collected it if unreferenced
                sdbus.lib.sd_bus_message_unref(m)
            if r <= 0:
                return
