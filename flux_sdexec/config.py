"""The ``[systemd]`` keys sdexec reads, validated. Pure: stdlib and the core only."""

import errno

from flux_sdexec import handoff
from flux_sdexec.errors import RequestError

_PREFIX = "error reading [systemd] config table"


def _systemd_table(conf):
    table = conf.get("systemd", {}) if isinstance(conf, dict) else None
    if not isinstance(table, dict):
        raise RequestError(errno.EINVAL, f"{_PREFIX}: not a table")
    return table


def sdexec_debug(conf):
    """``systemd.sdexec-debug`` from a whole config object (default False).

    Raises:
        RequestError: EINVAL, in flux-core's words, when it is not a boolean.
    """
    value = _systemd_table(conf).get("sdexec-debug", False)
    if not isinstance(value, bool):
        raise RequestError(
            errno.EINVAL,
            f"{_PREFIX}: Expected true or false, got {type(value).__name__}",
        )
    return value


def sdexec_unload(conf):
    """``systemd.sdexec-unload``: what a clean unload does with running units.

    Returns:
        ``keep-waitable`` (the default: hand waitable ones to the next sdexec while the
        instance runs) or ``stop-all``.

    Raises:
        RequestError: EINVAL naming the key and the allowed values.
    """
    value = _systemd_table(conf).get("sdexec-unload", handoff.KEEP_WAITABLE)
    if value not in handoff.POLICIES:
        allowed = " or ".join(f'"{p}"' for p in handoff.POLICIES)
        raise RequestError(
            errno.EINVAL, f"{_PREFIX}: sdexec-unload must be {allowed}, got {value!r}"
        )
    return value
