"""``SDEXEC_PROP_<Name>`` command options typed into systemd unit properties.

Owns the typing table of sdexec-protocol.md §4.2, extended with the issue's
CPUQuota, TasksMax and a few booleans. Each property becomes a
``(Name, signature, value)`` triple for StartTransientUnit. Names outside the
table go to systemd as strings, and systemd's own refusal (which names the
property) reaches the client. Pure: stdlib only.
"""

import errno
import re

from flux_sdexec.core.errors import RequestError
from flux_sdexec.core.values import UINT64_MAX, Bad, idset_bitmask, parse_size, percent

PREFIX = "SDEXEC_PROP_"
UINT32_MAX = 2**32 - 1

_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9]*\Z")
_TRUE = ("1", "yes", "true", "on")
_FALSE = ("0", "no", "false", "off")
_CHOICES = {
    "KillMode": ("control-group", "mixed", "process", "none"),
    "DevicePolicy": ("auto", "closed", "strict"),
    "OOMPolicy": ("continue", "stop", "kill"),
}


def _memory(name, text):
    pct = percent(text)
    if pct is not None:
        return [(name + "Scale", "u", int(pct / 100 * UINT32_MAX))]
    if text == "infinity":
        return [(name, "t", UINT64_MAX)]
    return [(name, "t", parse_size(text))]


def _tasks_max(name, text):
    pct = percent(text)
    if pct is not None:
        return [(name + "Scale", "u", int(pct / 100 * UINT32_MAX))]
    if text == "infinity":
        return [(name, "t", UINT64_MAX)]
    if not text.isdigit():
        raise Bad(f"{text!r} is not a count, N% or infinity")
    return [(name, "t", int(text))]


def _cpu_quota(name, text):
    # systemd-run's CPUQuota=N% is the D-Bus property CPUQuotaPerSecUSec
    if text == "infinity":
        return [("CPUQuotaPerSecUSec", "t", UINT64_MAX)]
    if not text.endswith("%"):
        raise Bad(f"{text!r} is not N% or infinity")
    try:
        value = float(text[:-1])
    except ValueError as exc:
        raise Bad(f"{text!r} is not N% or infinity") from exc
    if not value > 0 or value > 1e6:
        raise Bad(f"{text!r} must be above 0%")
    return [("CPUQuotaPerSecUSec", "t", int(value * 10000))]


def _usec(name, text):
    if text == "infinity":
        return [(name, "t", UINT64_MAX)]
    if not text.isdigit() or int(text) > UINT64_MAX:
        raise Bad(f"{text!r} is not microseconds (digits only) or infinity")
    return [(name, "t", int(text))]


def _boolean(name, text):
    word = text.lower()
    if word not in _TRUE + _FALSE:
        raise Bad(f"{text!r} is not a boolean")
    return [(name, "b", word in _TRUE)]


def _integer(sig):
    def convert(name, text):
        if not re.fullmatch(r"[+-]?[0-9]+", text):
            raise Bad(f"{text!r} is not an integer")
        return [(name, sig, int(text))]

    return convert


def _cpu_set(name, text):
    return [(name, "ay", idset_bitmask(text))]


def _device_allow(name, text):
    entries = []
    for entry in text.split(","):
        spec, _, perms = entry.strip().partition(" ")
        if not spec or not perms.strip():
            raise Bad(f"{entry!r} is not 'PATH PERMS'")
        entries.append((spec, perms.strip()))
    return [(name, "a(ss)", entries)]


def _choice(name, text):
    if text not in _CHOICES[name]:
        raise Bad(f"{text!r} is not one of {', '.join(_CHOICES[name])}")
    return [(name, "s", text)]


def _string(name, text):
    return [(name, "s", text)]


CONVERTERS = {
    "MemoryHigh": _memory,
    "MemoryMax": _memory,
    "MemoryMin": _memory,
    "MemoryLow": _memory,
    "MemorySwapMax": _memory,
    "TasksMax": _tasks_max,
    "CPUQuota": _cpu_quota,
    "AllowedCPUs": _cpu_set,
    "AllowedMemoryNodes": _cpu_set,
    "DeviceAllow": _device_allow,
    "TimeoutStopUSec": _usec,
    "TimeoutStartUSec": _usec,
    "RuntimeMaxUSec": _usec,
    "SendSIGKILL": _boolean,
    "SendSIGHUP": _boolean,
    "IgnoreSIGPIPE": _boolean,
    "CPUAccounting": _boolean,
    "MemoryAccounting": _boolean,
    "TasksAccounting": _boolean,
    "IOAccounting": _boolean,
    "Delegate": _boolean,
    "OOMScoreAdjust": _integer("i"),
    "Nice": _integer("i"),
    "CPUWeight": _integer("t"),
    "IOWeight": _integer("t"),
    "KillMode": _choice,
    "DevicePolicy": _choice,
    "OOMPolicy": _choice,
}


def unit_properties(opts):
    """Type every ``SDEXEC_PROP_<Name>`` option, in ``opts`` order.

    Args:
        opts: the command's options, a dict of str to str.

    Returns:
        list of (Name, D-Bus signature, value) triples.

    Raises:
        RequestError: EINVAL naming the option whose name or value is bad.
    """
    props = []
    for key, text in opts.items():
        if not key.startswith(PREFIX) or key == PREFIX:
            continue
        name = key[len(PREFIX) :]
        try:
            if not _NAME_RE.match(name):
                raise Bad("not a property name")
            props.extend(CONVERTERS.get(name, _string)(name, text))
        except Bad as exc:
            raise RequestError(errno.EINVAL, f"{key}: error setting property: {exc}") from None
    return props


def start_properties(cmdline, cwd, environment, fds, opts):
    """Every property of StartTransientUnit, in flux-core's order.

    Args:
        cmdline: argv; argv[0] is also the ExecStart path.
        cwd: WorkingDirectory, or None.
        environment: list of ``K=V`` strings.
        fds: stream -> systemd's fd, for the streams that have a channel.
        opts: the command options (``SDEXEC_PROP_*`` typed by unit_properties).

    Raises:
        RequestError: EINVAL for a bad ``SDEXEC_PROP_*``.
    """
    props = [("ExecStart", "a(sasb)", [(cmdline[0], cmdline, False)])]
    if cwd is not None:
        props.append(("WorkingDirectory", "s", cwd))
    props += [("RemainAfterExit", "b", True), ("Environment", "as", environment)]
    for stream, name in (("stdin", "Input"), ("stdout", "Output"), ("stderr", "Error")):
        if stream in fds:
            props.append((f"Standard{name}FileDescriptor", "h", fds[stream]))
    user = unit_properties(opts)
    props += user
    named = {name for name, _, _ in user}
    if "Type" not in named:
        props.append(("Type", "s", "exec"))
    if "IgnoreSIGPIPE" not in named:
        # systemd's default, made explicit: if sdexec dies, writes to the dead stdio
        # sockets fail with EPIPE instead of killing the process (doc/guide/recovery.md)
        props.append(("IgnoreSIGPIPE", "b", True))
    return props
