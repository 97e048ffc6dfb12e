"""The ``[systemd]`` keys sdexec reads, validated. Pure: stdlib only."""

import errno

from flux_sdexec.errors import RequestError


def sdexec_debug(conf):
    """``systemd.sdexec-debug`` from a whole config object (default False).

    Raises:
        RequestError: EINVAL, in flux-core's words, when it is not a boolean.
    """
    table = conf.get("systemd", {}) if isinstance(conf, dict) else None
    if not isinstance(table, dict):
        raise RequestError(errno.EINVAL, "error reading [systemd] config table: not a table")
    value = table.get("sdexec-debug", False)
    if not isinstance(value, bool):
        raise RequestError(
            errno.EINVAL,
            "error reading [systemd] config table: "
            f"Expected true or false, got {type(value).__name__}",
        )
    return value
