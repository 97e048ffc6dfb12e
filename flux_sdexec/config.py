"""The ``[systemd]`` keys sdexec reads, validated. Pure: stdlib and the core only."""

import dataclasses
import errno
import re

from flux_sdexec.core import handoff, orphans, settle
from flux_sdexec.containment.enforcement import CONSTRAINTS
from flux_sdexec.core.errors import RequestError

_PREFIX = "error reading [systemd] config table"

# Every config key flux-sdexec reads, as "table.key", and the file that reads it.
# flux-config-sdexec(5) documents each; t/unit/test_docs_drift.py checks that, and that no
# other key is read.
READ_KEYS = {
    "systemd.sdexec-debug": "flux_sdexec/config.py",
    "systemd.sdexec-unload": "flux_sdexec/config.py",
    "sdexec.containment-check": "flux_sdexec/config.py",
    "sdexec.containment-required": "flux_sdexec/config.py",
    "sdexec.systemd-timeout": "flux_sdexec/config.py",
    "sdexec.orphan-check-interval": "flux_sdexec/config.py",
    "sdexec.restart-grace": "flux_sdexec/config.py",
    "sdexec.usage": "flux_sdexec/config.py",
    "sdexec.mapper": "flux_sdexec/containment/mapper/mapper_service.py",
    "sdexec.mapper-searchpath": "flux_sdexec/containment/mapper/mapper_service.py",
    "sdexec.allowed-devices": "flux_sdexec/containment/mapper/mapper_service.py",
    "exec.sdexec-properties": "flux_sdexec/containment/mapper/mapper_service.py",
    "exec.method": "flux_sdexec/cli/upgrade.py",
}
# Keys flux-core reads whose meaning flux-sdexec changes or relies on (documented there too).
FLUX_CORE_KEYS = (
    "systemd.enable",
    "modules.sdexec.module",
    "modules.sdexec-mapper.module",
    "exec.service",
    "exec.sdexec-constrain-resources",
    "exec.sdexec-stop-timer-sec",
    "exec.sdexec-stop-timer-signal",
)


@dataclasses.dataclass(frozen=True)
class Config:
    """Every key sdexec reads from the instance's config, checked: parsed once at load and
    once at each ``config-reload``."""

    debug: bool = False  # [systemd] sdexec-debug
    unload_policy: str = handoff.KEEP_WAITABLE  # [systemd] sdexec-unload
    containment_check: str = "enforce"  # [sdexec] containment-check
    containment_required: tuple = ()  # [sdexec] containment-required
    systemd_timeout: float = settle.DEFAULT_BUDGET  # [sdexec] systemd-timeout
    orphan_interval: float = orphans.DEFAULT_INTERVAL  # [sdexec] orphan-check-interval
    restart_grace: float = handoff.DEFAULT_RESTART_GRACE  # [sdexec] restart-grace
    usage: str = "jobs"  # [sdexec] usage: which units get an accounting slice (USAGE_SCOPES)

    @classmethod
    def parse(cls, conf):
        """The Config of a whole config object; every key is checked before it is returned.

        Raises:
            RequestError: EINVAL, naming the first key that is wrong.
        """
        return cls(
            debug=sdexec_debug(conf),
            unload_policy=sdexec_unload(conf),
            containment_check=containment_check(conf),
            containment_required=containment_required(conf),
            systemd_timeout=systemd_timeout(conf),
            orphan_interval=orphan_check_interval(conf),
            restart_grace=restart_grace(conf),
            usage=usage(conf),
        )


@dataclasses.dataclass
class Settings:
    """What ``config-reload`` changes in place, read by the parts that use it."""

    debug: bool = False  # [systemd] sdexec-debug
    unload_policy: str = handoff.KEEP_WAITABLE  # [systemd] sdexec-unload
    restart_grace: float = handoff.DEFAULT_RESTART_GRACE  # [sdexec] restart-grace
    usage: str = "jobs"  # [sdexec] usage: which units get an accounting slice (USAGE_SCOPES)

    def take(self, config):
        """Take the values of ``config`` (a Config), at load and at each config-reload."""
        self.debug, self.unload_policy = config.debug, config.unload_policy
        self.restart_grace, self.usage = config.restart_grace, config.usage


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


CONTAINMENT_POLICIES = ("enforce", "warn", "off")


def _sdexec_table(conf):
    table = conf.get("sdexec", {}) if isinstance(conf, dict) else None
    if not isinstance(table, dict):
        raise RequestError(errno.EINVAL, "[sdexec] is not a table")
    return table


def containment_check(conf):
    """``sdexec.containment-check`` from a whole config object (default ``enforce``).

    Raises:
        RequestError: EINVAL naming the key and the accepted values.
    """
    value = _sdexec_table(conf).get("containment-check", "enforce")
    if value not in CONTAINMENT_POLICIES:
        raise RequestError(
            errno.EINVAL,
            f"sdexec.containment-check must be one of {', '.join(CONTAINMENT_POLICIES)}: "
            f"got {value!r}",
        )
    return value


def containment_required(conf):
    """``sdexec.containment-required``: the constraints that fail a constrained exec under
    ``enforce`` whenever they are not enforced, even those this host never enforces
    (containment/unenforceable.py). Default none.

    Returns:
        The names (``enforcement.CONSTRAINTS``), each once, in the order given.

    Raises:
        RequestError: EINVAL naming the entry that is not a constraint, or the key when it
            is not an array.
    """
    value = _sdexec_table(conf).get("containment-required", [])
    if not isinstance(value, list):
        raise RequestError(
            errno.EINVAL,
            f"sdexec.containment-required must be an array of constraint names: got {value!r}",
        )
    for i, name in enumerate(value):
        if not isinstance(name, str) or name not in CONSTRAINTS:
            raise RequestError(
                errno.EINVAL,
                f"sdexec.containment-required[{i}]: {name!r} is not a containment constraint"
                f" (one of {', '.join(CONSTRAINTS)})",
            )
    return tuple(dict.fromkeys(value))


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h|d)?")


def duration(value):
    """Seconds from a Flux standard duration ("300s", "5m", "1.5h", "500ms"; a bare number
    is seconds) or a TOML number; None when it is not one, or not more than zero."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str) and _DURATION.fullmatch(value.strip()):
        number, unit = _DURATION.fullmatch(value.strip()).groups()
        seconds = float(number) * _UNITS[unit or "s"]
    else:
        return None
    return seconds if 0 < seconds < float("inf") else None


def systemd_timeout(conf):
    """``sdexec.systemd-timeout``: seconds a systemd call may take, from its first send
    through lost replies and resends, before its exec fails (default settle.DEFAULT_BUDGET).

    Raises:
        RequestError: EINVAL naming the key and the accepted form.
    """
    value = _sdexec_table(conf).get("systemd-timeout")
    return _duration_key("systemd-timeout", value, settle.DEFAULT_BUDGET, '"5m" or "300s"')


def orphan_check_interval(conf):
    """``sdexec.orphan-check-interval``: the longest wait, in seconds, between two queries
    of the job of one suspect shell (default orphans.DEFAULT_INTERVAL).

    Raises:
        RequestError: EINVAL naming the key and the accepted form.
    """
    value = _sdexec_table(conf).get("orphan-check-interval")
    return _duration_key("orphan-check-interval", value, orphans.DEFAULT_INTERVAL, '"10s"')


def restart_grace(conf):
    """``sdexec.restart-grace``: seconds the units kept at a shutdown that running jobs
    outlive wait, after the broker's exit, for the restarted instance's sdexec (default
    handoff.DEFAULT_RESTART_GRACE).

    Raises:
        RequestError: EINVAL naming the key and the accepted form.
    """
    value = _sdexec_table(conf).get("restart-grace")
    return _duration_key("restart-grace", value, handoff.DEFAULT_RESTART_GRACE, '"5m"')


# sdexec.usage: whose figures are read, each unit of them in an accounting slice of its own
USAGE_SCOPES = ("jobs", "all", "none")


def usage(conf):
    """``sdexec.usage``: which units run in an accounting slice of their own, so that
    what they used is read at their exit: ``jobs`` (job shells: the default), ``all``
    (every unit, ``flux exec`` processes too) or ``none``.

    Raises:
        RequestError: EINVAL naming the key and the accepted values.
    """
    value = _sdexec_table(conf).get("usage", "jobs")
    if value not in USAGE_SCOPES:
        raise RequestError(
            errno.EINVAL, f"sdexec.usage must be one of {', '.join(USAGE_SCOPES)}: got {value!r}"
        )
    return value


def _duration_key(key, value, default, example):
    """The seconds of duration ``value`` of ``sdexec.<key>``, ``default`` when unset.

    Raises:
        RequestError: EINVAL naming the key and the accepted form (``example``).
    """
    if value is None:
        return default
    seconds = duration(value)
    if seconds is None:
        raise RequestError(
            errno.EINVAL,
            f"sdexec.{key} must be a duration above zero like {example}: got {value!r}",
        )
    return seconds
