"""The bridge to the systemd manager: method calls out, PropertiesChanged and replies in.

Imports no flux; runs no thread or loop of its own: the owner watches ``fileno()``
(for POLLIN, and POLLOUT while ``wants_write()``) and calls ``pump()``, which hands
each PropertiesChanged of a watched unit to ``on_change(unit, props)`` (``props``
holding only the ``tracked`` names) and each reply to its call's ``on_reply``.

The split (measured, see doc/dev/performance.md):

- Hot path, on our cffi binding of sd-bus (sdbus*.py): the signals (matched with a NULL
  callback, ~30-40 µs of CPU each instead of pystemd's ~120-160 µs, which builds every
  property of every signal) and StartTransientUnit / StopUnit / KillUnit / ResetFailedUnit.
  Given ``on_reply``, a call is sent without waiting (a start costs ~0.4 ms of wall time
  instead of 2.3-2.7 ms) and ``on_reply(None or UnitError)`` runs from a later pump();
  each call has its own deadline (``expire()``, ETIMEDOUT). Without it the call blocks
  (teardown after the reactor stopped, tests).
- The hot path talks to systemd straight over its private socket when it can (connect.py),
  else over the bus. Each call, reply and signal then makes one hop instead of two
  through dbus-daemon, and systemd skips the bus lookups it makes for each job's requester:
  a unit's start-to-EOF cycle measured 3.3 ms instead of 4.0 ms. A private connection gets
  every signal of the manager, unasked; pump() drops what is not a watched unit's.
- Rare calls, on pystemd (rare.py, its own connection): listing units (adoption, unload;
  ``sdexec.units``, which runs on the reactor, lists on the hot path without waiting) and
  reading all of a unit's properties (adoption) need a general D-Bus decoder; signals
  and answers then come over two connections: pump() before them. After a reconnect,
  ``read_unit`` reads the tracked properties on the hot path, in order with the signals.

Things the owner must know (systemd 252 user mode, see t/systemd):

- systemd sends unit PropertiesChanged only while some client is subscribed (open() calls
  Subscribe()); they are broadcast. Each change comes as two signals, Service (ExecMain*,
  MainPID, Result) then Unit (ActiveState, SubState, Job, ...), each carrying all its
  properties, changed or not. pump() hands on_change only a signal whose tracked
  values differ from the last ones its interface sent for the unit.
- A blocking call leaves what it read meanwhile queued inside sd-bus, where the fd may
  never become readable for it: **call pump() after every blocking call**.
- A unit's name can be started again once systemd has unloaded the unit of that name (a
  label reused: after_release.py), which another connection may have told us (holds.py)
  while this one still holds the old unit's last PropertiesChanged, its exit status in
  them. systemd sends them before it reads the new start (else: EEXIST), so on this
  connection they come before its answer: pump() drops a unit's signals from the sending of
  a StartTransientUnit without waiting until its answer (``_starting``). Nothing of the new
  unit is lost: its start job runs only after the answer, and each later signal carries
  every property.
- A D-Bus error's errno is the one sd-bus maps its name to, its message systemd's text:
  InvalidArgs EINVAL, UnitExists EEXIST, NoSuchUnit ENOENT, NoSuchProcess ESRCH (KillUnit
  with no main process), PropertyReadOnly EROFS (an unknown transient property),
  AccessDenied EACCES, unknown names EIO.
- After a connection loss pump() fails every pending call with ECONNRESET, then it, every
  call and fileno() raise UnitError(ECONNRESET); ``reconnect()`` gives a new fd at once,
  its Subscribe() answered later (``subscribed``; a refusal is a loss like any other).
- A lost reply or a passed deadline does not say whether systemd acted: the callers
  settle such a call by looking the unit up (``get_unit``, settle.py, calls.py).
"""

from __future__ import annotations

import errno
import os
import time

from flux_sdexec.systemd import sdbus
from flux_sdexec.systemd.connect import MANAGER, MANAGER_PATH, SYSTEMD, open_bus
from flux_sdexec.systemd.sdbus import (
    METHOD_ERROR,
    SIGNAL,
    PropsDecoder,
    append,
    append_all,
    append_properties,
    ffi,
    lib,
)
from flux_sdexec.systemd.rare import RareCalls
from flux_sdexec.systemd.unitsignals import UnitSignals
from flux_sdexec.core.errors import UnitError

UNIT_PREFIX = b"/org/freedesktop/systemd1/unit"
PROPERTIES = b"org.freedesktop.DBus.Properties"
SERVICE = "org.freedesktop.systemd1.Service"
CALL_TIMEOUT_SEC = 25.0  # sd-bus's default for a blocking call
LOST = "lost connection to systemd"


def _error(code, text):
    if code in sdbus.DISCONNECTED:
        return UnitError(errno.ECONNRESET, LOST)
    return UnitError(code, text or os.strerror(code))


class SystemdBridge:
    """One connection to the systemd manager (module docstring); calls raise UnitError."""

    def __init__(self, on_change, tracked, user_mode=True, shared=False):
        self._on_change = on_change
        self.signals = UnitSignals(shared)  # which signals reach us, and how many others do
        self._decoder = PropsDecoder(tracked)
        # read_unit's GetAll answers: whether the unit was ever active too (unitstate.py)
        self._reads = PropsDecoder((*tracked, "LoadState", "ActiveEnterTimestamp"))
        self._user_mode = user_mode
        self._bus = None
        self._lost = False
        self.via = None  # how the hot path reaches systemd: the private socket or the bus
        self._rare = RareCalls(user_mode)
        self._watched = {}  # unit object path -> unit name
        self._starting = {}  # unit object path -> its starts sent and not answered yet
        self._seen = {}  # unit object path -> {interface: the last tracked values it sent}
        self._pending = {}  # reply cookie -> (deadline, on_reply, decode), oldest first
        self._subscribing = None  # the cookie of a Subscribe() not answered yet
        self.subscribed = False

    def open(self) -> None:
        """Connect (connect.py), match PropertiesChanged, wait for Subscribe()'s answer."""
        self._open(wait=True)

    def close(self) -> None:
        """Drop the connections (the watched set stays for reconnect()); a call still
        unanswered fails with ECONNRESET (the owner fails them first to act on it:
        ``fail_pending``)."""
        self.signals.detach()
        if self._bus is not None:
            self._bus.close()
            self._bus = None
        self._lost = False
        self._rare.close()
        self.fail_pending(UnitError(errno.ECONNRESET, "connection to systemd closed"))

    def reconnect(self) -> None:
        """Close and open again without waiting for systemd (Subscribe() is answered later,
        see ``subscribed``); fileno() changes. What was seen before is forgotten: the owner
        re-reads every unit (read_unit), signals count again. On failure the bridge stays
        lost (ECONNRESET) for the next attempt."""
        self.close()
        self._seen.clear()
        try:
            self._open(wait=False)
        except UnitError:
            self._lost = True
            raise

    def _open(self, wait):
        try:
            self._bus, self.via, self._subscribing = open_bus(self._user_mode, wait, self.signals)
        except OSError as exc:
            raise _error(exc.errno, exc.strerror) from None
        self._lost = False
        self.subscribed = wait

    def fileno(self) -> int:
        return self._connected().fileno()

    def wants_write(self) -> bool:
        """sd-bus has queued output: watch the fd for POLLOUT too, and pump() then."""
        return self._bus is not None and not self._lost and bool(self._bus.events() & 4)

    def watch(self, unit: str) -> None:
        self.signals.add(path := sdbus.path_encode(UNIT_PREFIX, unit))
        self._watched[path] = unit

    def unwatch(self, unit: str) -> None:
        path = sdbus.path_encode(UNIT_PREFIX, unit)
        self._watched.pop(path, None)
        self.signals.remove(path)
        self._seen.pop(path, None)

    def pump(self) -> None:
        """Process the bus until it is idle: signals of watched units to on_change(),
        replies to their on_reply. What a callback raises propagates; the messages not yet
        taken stay queued for the next pump(), which the owner must then call itself."""
        bus = self._connected()
        while True:
            try:
                r, m, kind, cookie = bus.process()
            except OSError as exc:
                self._lose(_error(exc.errno, exc.strerror))
            if m != ffi.NULL:
                try:
                    if kind == SIGNAL:
                        self._signal(m)
                    else:
                        self._reply(m, kind, cookie)
                finally:
                    lib.sd_bus_message_unref(m)
            if r == 0:
                return

    def _signal(self, m):
        p = lib.sd_bus_message_get_path(m)
        path = ffi.string(p) if p != ffi.NULL else None
        unit = self._watched.get(path)
        if unit is not None:
            if path in self._starting:
                return  # a predecessor's of the same name (module docstring)
            # each change comes as a Service and a Unit signal carrying all their
            # properties: about half repeat what the same interface said last time
            iface, props = self._decoder.decode(m)
            seen = self._seen.setdefault(path, {})
            if seen.get(iface) != props:
                seen[iface] = props
                self._on_change(unit, props)
        elif lib.sd_bus_message_is_signal(m, b"org.freedesktop.DBus.Local", b"Disconnected"):
            self._lose(UnitError(errno.ECONNRESET, LOST))
        else:
            self.signals.unwatched(path)

    def _reply(self, m, kind, cookie):
        if cookie == self._subscribing:
            self._subscribing = None
            if kind == METHOD_ERROR:
                text = sdbus.reply_error(m)[1]
                self._lose(UnitError(errno.ECONNRESET, f"Subscribe refused: {text}"))
            self.subscribed = True
            return
        call = self._pending.pop(cookie, None)
        if call is None:
            return
        _, on_reply, decode = call
        if kind == METHOD_ERROR:
            on_reply(_error(*sdbus.reply_error(m)))
        elif decode is None:
            on_reply(None)
        else:
            try:
                result = decode(m)
            except OSError as exc:  # a reply we cannot read still answers its call, once
                on_reply(UnitError(exc.errno or errno.EPROTO, f"unreadable reply: {exc}"))
                return
            on_reply(None, result)

    def _lose(self, exc):
        """A failed process(): fail the pending calls with ECONNRESET if the bus is lost."""
        if exc.errno == errno.ECONNRESET:
            self.drop(exc)
        raise exc

    def drop(self, exc=None) -> None:
        """Take the connection as lost (pump() keeps failing too): calls fail; reconnect()."""
        self._lost = True
        self.fail_pending(exc or UnitError(errno.ECONNRESET, LOST))

    def fail_pending(self, exc) -> None:
        """Every call sent without waiting and not answered yet gets ``exc`` as its answer
        (the unload stops waiting: whoever sent it decides what follows)."""
        pending, self._pending = self._pending, {}
        for _, on_reply, _ in pending.values():
            on_reply(exc)

    def next_deadline(self):
        """The deadline (time.monotonic()) of the oldest pending call, or None. Every call has
        the owner's one per-call deadline, so it is the earliest (a reload that shortens it
        can make a newer call's expiry wait for the oldest's)."""
        return next(iter(self._pending.values()))[0] if self._pending else None

    def expire(self, now=None) -> None:
        """Fail every pending call whose deadline passed with ETIMEDOUT."""
        now = time.monotonic() if now is None else now
        late = [c for c, (deadline, _, _) in self._pending.items() if deadline <= now]
        for cookie in late:
            self._pending.pop(cookie)[1](UnitError(errno.ETIMEDOUT, "systemd did not answer"))

    # ---- the hot path's calls: sent without waiting when given on_reply ----

    def start_transient_unit(self, unit, props, on_reply=None, timeout=CALL_TIMEOUT_SEC, aux=()):
        """StartTransientUnit(unit, "fail", props, aux): props as (Name, signature, value).
        Sent without waiting, the unit's signals are dropped until it is answered."""
        if on_reply is not None:
            path = sdbus.path_encode(UNIT_PREFIX, unit)
            on_reply = self._started(path, on_reply)
        self._call(b"StartTransientUnit", b"ss", (unit, "fail"), on_reply, timeout, (props, aux))
        if on_reply is not None:
            self._starting[path] = self._starting.get(path, 0) + 1

    def _started(self, path, on_reply):
        """``on_reply`` of a start, which first lets the unit's signals through again."""

        def answered(*args):
            left = self._starting.pop(path) - 1
            if left:
                self._starting[path] = left
            on_reply(*args)

        return answered

    def stop_unit(self, unit, on_reply=None, timeout=CALL_TIMEOUT_SEC, mode="fail"):
        """StopUnit(unit, mode): "fail" is refused while a start job is queued, "replace"
        cancels that job (for a unit whose exec has failed, sweeper.py)."""
        self._call(b"StopUnit", b"ss", (unit, mode), on_reply, timeout)

    def kill_unit(self, unit, signum, who="main", on_reply=None, timeout=CALL_TIMEOUT_SEC):
        """KillUnit(unit, who, signum); who is "main" or "all"."""
        self._call(b"KillUnit", b"ssi", (unit, who, signum), on_reply, timeout)

    def reset_failed_unit(self, unit, on_reply=None, timeout=CALL_TIMEOUT_SEC):
        self._call(b"ResetFailedUnit", b"s", (unit,), on_reply, timeout)

    def get_unit(self, unit, on_reply=None, timeout=CALL_TIMEOUT_SEC):
        """GetUnit(unit): answers None when systemd has the unit loaded, ENOENT when not.
        Sent on the hot path's connection, it is answered after every call sent before it."""
        self._call(b"GetUnit", b"s", (unit,), on_reply, timeout)

    def read_unit(self, unit, on_reply, timeout=CALL_TIMEOUT_SEC):
        """GetAll of every interface of the unit, sent without waiting: a later pump() calls
        ``on_reply(None, props)`` (LoadState, ActiveEnterTimestamp and the tracked names) or
        ``on_reply(UnitError)``.
        Answered after every call sent before it. A unit systemd does not have answers
        LoadState "not-found" and is loaded as a stub for a moment: GetUnit would find it."""
        path = sdbus.path_encode(UNIT_PREFIX, unit)
        decode = self._reads.decode_all
        self._call(b"GetAll", b"s", ("",), on_reply, timeout, target=(path, PROPERTIES, decode))

    def get_property(self, unit, name, on_reply, timeout=CALL_TIMEOUT_SEC, iface=SERVICE):
        """Get(iface, name) of the unit, sent without waiting: a later pump() calls
        ``on_reply(None, value)`` (a basic type) or ``on_reply(UnitError)``. Answered after
        every call sent before it, before every call sent after it (an exited unit's
        figures: before the stop that follows)."""
        path = sdbus.path_encode(UNIT_PREFIX, unit)
        target = (path, PROPERTIES, sdbus.read_variant)
        self._call(b"Get", b"ss", (iface, name), on_reply, timeout, target=target)

    @property
    def lost(self):
        """The connection was lost and not yet re-opened."""
        return self._lost

    def _call(self, member, sig, args, on_reply=None, timeout=None, unit=None, target=None):
        """``unit``: a start's (props, aux); ``target``: (path, iface, decoder), not the manager."""
        bus = self._connected()
        obj, iface, decode = target or (MANAGER_PATH, MANAGER, None)
        try:
            m = bus.new_call(SYSTEMD, obj, iface, member)
            append_all(m, sig, args)
            if unit is not None:
                append_properties(m, unit[0])
                append(m, b"a(sa(sv))", unit[1])
            if on_reply is None:
                bus.call(m, int((timeout or 0) * 1e6))
            else:
                self._pending[bus.send(m)] = (time.monotonic() + timeout, on_reply, decode)
        except OSError as exc:
            raise _error(exc.errno, exc.strerror) from None

    def _connected(self):
        if self._lost:
            raise UnitError(errno.ECONNRESET, LOST)
        if self._bus is None:
            raise UnitError(errno.ENOTCONN, "not connected to systemd")
        return self._bus

    # ---- the rare calls, on pystemd (rare.py) ----

    def get_unit_properties(self, unit: str) -> dict:
        """Unit and Service properties, merged and decoded (not loaded: LoadState "not-found")."""
        self._connected()
        return self._rare.get_unit_properties(sdbus.path_encode(UNIT_PREFIX, unit))

    def list_units(self, patterns: list[str], on_reply=None, timeout=CALL_TIMEOUT_SEC):
        """Loaded units matching the globs, as (name, ActiveState, SubState).

        Without ``on_reply``, a blocking call on pystemd (adoption at load, teardown: no
        reactor runs then). With it, ListUnitsByPatterns goes on the hot path without
        waiting (``sdexec.units`` while the reactor runs): a later pump() calls
        ``on_reply(None, units)`` or ``on_reply(UnitError)``.
        """
        if on_reply is None:
            self._connected()
            return self._rare.list_units(patterns)
        target = (MANAGER_PATH, MANAGER, sdbus.read_unit_list)
        self._call(
            b"ListUnitsByPatterns", b"asas", ([], patterns), on_reply, timeout, target=target
        )
        return None
