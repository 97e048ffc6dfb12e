"""The systemd calls that are rare and not latency-critical, on pystemd.

Listing units (adoption, unload) and reading all of a unit's properties
(adoption, after a reconnect) need a general D-Bus decoder, which pystemd has.
They use their own connection, opened when first needed and again after a loss.
"""

import errno
import os

from pystemd.dbusexc import DBusBaseError
from pystemd.dbuslib import DBus, apply_signature

from flux_sdexec.core.errors import UnitError

SYSTEMD = b"org.freedesktop.systemd1"
MANAGER_PATH = b"/org/freedesktop/systemd1"
MANAGER = b"org.freedesktop.systemd1.Manager"
PROPERTIES = b"org.freedesktop.DBus.Properties"
UNIT_INTERFACES = (b"org.freedesktop.systemd1.Unit", b"org.freedesktop.systemd1.Service")
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


class RareCalls:
    """Raises UnitError: ECONNRESET for a lost connection, else the D-Bus error's errno."""

    def __init__(self, user_mode=True):
        self._user_mode = user_mode
        self._bus = None

    def close(self):
        if self._bus is not None:
            self._bus.close()
            self._bus = None

    def get_unit_properties(self, path):
        """Unit and Service properties of the unit at object ``path``, merged and decoded."""
        props = {}
        for iface in UNIT_INTERFACES:
            value = self._call(path, PROPERTIES, b"GetAll", apply_signature(b"s", [iface]))
            props.update(_decode(value) if value else {})  # pystemd: an empty a{sv} is []
        return props

    def list_units(self, patterns):
        """Loaded units matching the globs, as (name, ActiveState, SubState)."""
        args = apply_signature(b"asas", [[], patterns])
        units = _decode(self._call(MANAGER_PATH, MANAGER, b"ListUnitsByPatterns", args) or [])
        return [(u[0], u[3], u[4]) for u in units]

    def _call(self, path, iface, method, args):
        try:
            if self._bus is None:
                bus = DBus(user_mode=self._user_mode)
                bus.open()
                self._bus = bus
            return self._bus.call_method(SYSTEMD, path, iface, method, args).body
        except DBusBaseError as exc:
            code = -exc.errno if exc.errno < 0 else errno.EINVAL
            if code in _DISCONNECTED:
                self.close()  # opened again by the next call
                raise UnitError(errno.ECONNRESET, "lost connection to systemd") from exc
            raise UnitError(code, _decode(exc.err_message) or os.strerror(code)) from exc
