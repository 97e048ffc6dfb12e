"""pystemd bridge to the systemd manager: method calls out, PropertiesChanged in.

Owns one sd-bus connection. Imports no flux; runs no thread or loop of its own: the owner
watches ``fileno()`` and calls ``pump()``, which hands each PropertiesChanged signal of a
watched unit to ``on_change(unit, props)``, ``props`` holding only the ``tracked`` names
(a Service signal carries ~100 properties: decoding only what is used saves ~3 ms of CPU
per unit).

Things the owner must know (measured against systemd 252 user mode, see t/systemd):

- Calls are blocking ``sd_bus_call`` with sd-bus's default 25 s timeout (``SYSTEMD_BUS_TIMEOUT``
  overrides it). Median (max) of 30 calls on a loaded 4-CPU VM: StartTransientUnit 2.3 ms
  (7 ms), KillUnit 2.6 ms (11 ms), StopUnit 1.6 ms (3 ms), ResetFailedUnit 0.6 ms (5 ms),
  ListUnitsByPatterns 0.6 ms, get_unit_properties (two GetAll, ~250 properties) 8 ms (11 ms).
- Signals that arrive while a call waits for its reply are queued inside sd-bus, and the fd
  may never become readable for them, so **call pump() after every call**.
- systemd sends unit PropertiesChanged only while some client is subscribed (open() calls
  Subscribe()); they are broadcast, so they also arrive when another client subscribed.
  Each change comes as two signals, Service interface (ExecMain*, MainPID, Result) first,
  then Unit (ActiveState, SubState, Job, ...), each carrying all its properties, changed or
  not; a Job change alone repeats the current state.
- pystemd hides sd_bus_process's return code, so an empty result may still mean "did some
  work" (a consumed message, the first step of a disconnect). pump() therefore stops only
  after two empty results in a row.
- A D-Bus error's errno is the one sd-bus maps its name to (pystemd's negative
  ``DBusError.errno``; pystemd drops the name itself for names it has a class for), and its
  message is the strerror: InvalidArgs EINVAL, UnitExists EEXIST, NoSuchUnit ENOENT,
  NoSuchProcess ESRCH (KillUnit with no main process), PropertyReadOnly EROFS (systemd's
  answer to an unknown transient property), AccessDenied EACCES, unknown names EIO.
- After a connection loss every call and pump() raise UnitError(ECONNRESET); ``reconnect()``
  gives a new fd, so the owner must re-create its fd watcher.
"""

from __future__ import annotations

import errno
import os
from collections import deque

from pystemd.dbusexc import DBusBaseError
from pystemd.dbuslib import DBus, apply_signature, path_encode

from flux_sdexec.errors import UnitError

SYSTEMD = b"org.freedesktop.systemd1"
MANAGER_PATH = b"/org/freedesktop/systemd1"
MANAGER = b"org.freedesktop.systemd1.Manager"
PROPERTIES = b"org.freedesktop.DBus.Properties"
UNIT_PREFIX = b"/org/freedesktop/systemd1/unit"
UNIT_INTERFACES = (b"org.freedesktop.systemd1.Unit", b"org.freedesktop.systemd1.Service")

_CLOSE = (-1, None)  # pystemd's "close container" argument
_DISCONNECTED = {errno.ECONNRESET, errno.ENOTCONN, errno.EPIPE, errno.ESHUTDOWN}


def _decode(value):
    """pystemd reply value -> plain Python: bytes become str, containers are rebuilt."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, (list, tuple)):
        return type(value)(_decode(v) for v in value)
    if isinstance(value, dict):
        return {_decode(k): _decode(v) for k, v in value.items()}
    return value


def _props(value):
    # pystemd renders an empty a{sv} as [] rather than {}
    return _decode(value) if value else {}


def _unit_error(exc):
    code = -exc.errno if exc.errno < 0 else errno.EINVAL
    if code in _DISCONNECTED:
        return UnitError(errno.ECONNRESET, "lost connection to systemd")
    return UnitError(code, _decode(exc.err_message) or os.strerror(code))


def _variant_props(props):
    """[(Name, signature, value)] -> pystemd arguments for an a(sv)."""
    args = [(ord("a"), b"(sv)")]
    for name, sig, value in props:
        args += [(ord("r"), b"sv"), (ord("s"), name), (ord("v"), sig.encode())]
        args += apply_signature(sig.encode(), [value])
        args += [_CLOSE, _CLOSE]
    return args + [_CLOSE]


def _unit_path(unit):
    return path_encode(UNIT_PREFIX, unit.encode())


class SystemdBridge:
    """One connection to the systemd manager; see the module docstring for the rules.

    Every method that talks to systemd raises UnitError on failure.
    """

    def __init__(self, on_change, tracked, user_mode=True):
        self._on_change = on_change
        self._tracked = frozenset(name.encode() for name in tracked)
        self._user_mode = user_mode
        self._bus = None
        self._watched = {}  # unit object path -> unit name
        self._signals = deque()

    def open(self) -> None:
        """Connect, Subscribe(), and match PropertiesChanged from systemd (once: pystemd
        cannot remove matches, so units are told apart by object path in pump())."""
        bus = DBus(user_mode=self._user_mode)
        signals = self._signals = deque()

        def on_signal(msg, error=None, userdata=None):
            signals.append(msg)  # decoded in pump(), where on_change() may raise freely

        try:
            bus.open()
            self._bus = bus
            self._match = on_signal  # pystemd keeps only a borrowed pointer to it
            bus.match_signal(SYSTEMD, None, PROPERTIES, b"PropertiesChanged", on_signal)
        except DBusBaseError as exc:
            raise _unit_error(exc) from exc
        self._call(MANAGER_PATH, MANAGER, b"Subscribe", [])

    def close(self) -> None:
        """Drop the connection; the watched set is kept for reconnect()."""
        if self._bus is not None:
            self._bus.close()
            self._bus = None
        self._signals.clear()

    def reconnect(self) -> None:
        """Close and open again, re-subscribing; fileno() changes."""
        self.close()
        self.open()

    def fileno(self) -> int:
        fd = self._connected().get_fd()
        if fd < 0:
            raise UnitError(errno.ECONNRESET, "lost connection to systemd")
        return fd

    def pump(self) -> None:
        """Process the bus until it is idle, calling on_change() for watched units.

        An exception from on_change() propagates; signals not yet delivered stay queued for
        the next pump(), which the owner must then call itself.
        """
        bus = self._connected()
        empty = 0
        while empty < 2:  # see "pystemd hides" in the module docstring
            try:
                msg = bus.process()
            except DBusBaseError as exc:
                raise _unit_error(exc) from exc
            if msg.is_signal(b"org.freedesktop.DBus.Local", b"Disconnected"):
                raise UnitError(errno.ECONNRESET, "lost connection to systemd")
            while self._signals:
                sig = self._signals.popleft()
                unit = self._watched.get(sig.get_path())
                if unit is not None:
                    sig.process_reply(False)
                    changed = sig.body[1] or {}
                    self._on_change(
                        unit,
                        {k.decode(): _decode(v) for k, v in changed.items() if k in self._tracked},
                    )
            empty = empty + 1 if msg.is_empty() else 0

    def watch(self, unit: str) -> None:
        self._watched[_unit_path(unit)] = unit

    def unwatch(self, unit: str) -> None:
        self._watched.pop(_unit_path(unit), None)

    def start_transient_unit(self, unit: str, props: list) -> None:
        """StartTransientUnit(unit, "fail", props, []); props are (Name, signature, value)."""
        args = apply_signature(b"ss", [unit, "fail"]) + _variant_props(props)
        self._call(
            MANAGER_PATH, MANAGER, b"StartTransientUnit", args + [(ord("a"), b"(sa(sv))"), _CLOSE]
        )

    def stop_unit(self, unit: str) -> None:
        self._call(MANAGER_PATH, MANAGER, b"StopUnit", apply_signature(b"ss", [unit, "fail"]))

    def kill_unit(self, unit: str, signum: int, who: str = "main") -> None:
        """KillUnit(unit, who, signum); who is "main" or "all"."""
        args = apply_signature(b"ssi", [unit, who, signum])
        self._call(MANAGER_PATH, MANAGER, b"KillUnit", args)

    def reset_failed_unit(self, unit: str) -> None:
        self._call(MANAGER_PATH, MANAGER, b"ResetFailedUnit", apply_signature(b"s", [unit]))

    def get_unit_properties(self, unit: str) -> dict:
        """Unit and Service properties of the unit, merged and decoded.

        A unit that is not loaded is not an error: it answers LoadState "not-found".
        """
        props = {}
        for iface in UNIT_INTERFACES:
            args = apply_signature(b"s", [iface])
            props.update(_props(self._call(_unit_path(unit), PROPERTIES, b"GetAll", args)))
        return props

    def list_units(self, patterns: list[str]) -> list[tuple[str, str, str]]:
        """Loaded units matching the globs, as (name, ActiveState, SubState)."""
        args = apply_signature(b"asas", [[], patterns])
        units = _decode(self._call(MANAGER_PATH, MANAGER, b"ListUnitsByPatterns", args) or [])
        return [(u[0], u[3], u[4]) for u in units]

    def _connected(self):
        if self._bus is None:
            raise UnitError(errno.ENOTCONN, "not connected to systemd")
        return self._bus

    def _call(self, path, iface, method, args):
        try:
            return self._connected().call_method(SYSTEMD, path, iface, method, args).body
        except DBusBaseError as exc:
            raise _unit_error(exc) from exc
