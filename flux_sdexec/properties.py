"""``SDEXEC_PROP_<Name>`` command options typed into systemd unit properties.

Owns the typing table of sdexec-protocol.md §4.2, extended with the issue's
CPUQuota, TasksMax and a few booleans. Each property becomes a
``(Name, signature, value)`` triple for StartTransientUnit. Names outside the
table go to systemd as strings, and systemd's own refusal (which names the
property) reaches the client. Pure: stdlib only.
"""

import errno
import re

from flux_sdexec.errors import RequestError

PREFIX = "SDEXEC_PROP_"
UINT64_MAX = 2**64 - 1
UINT32_MAX = 2**32 - 1
IDSET_MAX_ID = 1 << 20  # refuse absurd ids rather than build a huge bitmask

_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9]*\Z")
_SIZE_SUFFIX = {"": 0, "k": 10, "K": 10, "M": 20, "G": 30, "T": 40, "P": 50, "E": 60}
_TRUE = ("1", "yes", "true", "on")
_FALSE = ("0", "no", "false", "off")
_CHOICES = {
    "KillMode": ("control-group", "mixed", "process", "none"),
    "DevicePolicy": ("auto", "closed", "strict"),
    "OOMPolicy": ("continue", "stop", "kill"),
}


class _Bad(ValueError):
    """A value that does not convert; the caller names the property."""


def parse_size(text):
    """Bytes from ``512``, ``0x200``, ``0777``, ``1.5G``, ``4k`` (powers of 1024)."""
    number, suffix = text, ""
    if text and text[-1] in _SIZE_SUFFIX and not text.lower().startswith("0x"):
        number, suffix = text[:-1], text[-1]
    try:
        if re.fullmatch(r"0[xX][0-9a-fA-F]+", number):
            value = int(number, 16)
        elif re.fullmatch(r"0[0-7]+", number):
            value = int(number, 8)
        elif re.fullmatch(r"[0-9]+", number):
            value = int(number)
        elif re.fullmatch(r"[0-9]*\.[0-9]+|[0-9]+\.[0-9]*", number):
            value = float(number)
        else:
            raise _Bad(f"{text!r} is not a size")
    except ValueError as exc:
        raise _Bad(f"{text!r} is not a size") from exc
    value = int(value * (1 << _SIZE_SUFFIX[suffix]))
    if value > UINT64_MAX:
        raise _Bad(f"{text!r} is too large")
    return value


def _percent(text):
    """The N of ``N%`` (0 <= N <= 100, fraction allowed), or None if no ``%``."""
    if not text.endswith("%"):
        return None
    try:
        value = float(text[:-1])
    except ValueError as exc:
        raise _Bad(f"{text!r} is not a percentage") from exc
    if not 0 <= value <= 100 or text.count("%") != 1:
        raise _Bad(f"{text!r} is not a percentage from 0 to 100")
    return value


def parse_idset(text):
    """RFC 22 idset (``0,57-99,127``, optional brackets) to a sorted list of ids."""
    body = text.strip()
    if body.startswith("[") and body.endswith("]"):
        body = body[1:-1]
    ids = set()
    for part in filter(None, body.split(",")):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise _Bad(f"{text!r} is not an idset")
        first, last = int(lo), int(hi or lo)
        if first > last or last > IDSET_MAX_ID:
            raise _Bad(f"{text!r} is not a usable idset")
        ids.update(range(first, last + 1))
    return sorted(ids)


def idset_bitmask(text):
    """systemd's ``ay`` CPU/NUMA mask: byte i holds ids 8i..8i+7, LSB first."""
    ids = parse_idset(text)
    mask = bytearray((ids[-1] // 8 + 1) if ids else 0)
    for i in ids:
        mask[i // 8] |= 1 << (i % 8)
    return bytes(mask)


def _memory(name, text):
    pct = _percent(text)
    if pct is not None:
        return [(name + "Scale", "u", int(pct / 100 * UINT32_MAX))]
    if text == "infinity":
        return [(name, "t", UINT64_MAX)]
    return [(name, "t", parse_size(text))]


def _tasks_max(name, text):
    pct = _percent(text)
    if pct is not None:
        return [(name + "Scale", "u", int(pct / 100 * UINT32_MAX))]
    if text == "infinity":
        return [(name, "t", UINT64_MAX)]
    if not text.isdigit():
        raise _Bad(f"{text!r} is not a count, N% or infinity")
    return [(name, "t", int(text))]


def _cpu_quota(name, text):
    # systemd-run's CPUQuota=N% is the D-Bus property CPUQuotaPerSecUSec
    if text == "infinity":
        return [("CPUQuotaPerSecUSec", "t", UINT64_MAX)]
    if not text.endswith("%"):
        raise _Bad(f"{text!r} is not N% or infinity")
    try:
        value = float(text[:-1])
    except ValueError as exc:
        raise _Bad(f"{text!r} is not N% or infinity") from exc
    if not value > 0 or value > 1e6:
        raise _Bad(f"{text!r} must be above 0%")
    return [("CPUQuotaPerSecUSec", "t", int(value * 10000))]


def _usec(name, text):
    if text == "infinity":
        return [(name, "t", UINT64_MAX)]
    if not text.isdigit() or int(text) > UINT64_MAX:
        raise _Bad(f"{text!r} is not microseconds (digits only) or infinity")
    return [(name, "t", int(text))]


def _boolean(name, text):
    word = text.lower()
    if word not in _TRUE + _FALSE:
        raise _Bad(f"{text!r} is not a boolean")
    return [(name, "b", word in _TRUE)]


def _integer(sig):
    def convert(name, text):
        if not re.fullmatch(r"[+-]?[0-9]+", text):
            raise _Bad(f"{text!r} is not an integer")
        return [(name, sig, int(text))]

    return convert


def _cpu_set(name, text):
    return [(name, "ay", idset_bitmask(text))]


def _device_allow(name, text):
    entries = []
    for entry in text.split(","):
        spec, _, perms = entry.strip().partition(" ")
        if not spec or not perms.strip():
            raise _Bad(f"{entry!r} is not 'PATH PERMS'")
        entries.append((spec, perms.strip()))
    return [(name, "a(ss)", entries)]


def _choice(name, text):
    if text not in _CHOICES[name]:
        raise _Bad(f"{text!r} is not one of {', '.join(_CHOICES[name])}")
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
                raise _Bad("not a property name")
            props.extend(CONVERTERS.get(name, _string)(name, text))
        except _Bad as exc:
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
        # sockets fail with EPIPE instead of killing the process (README, crash recovery)
        props.append(("IgnoreSIGPIPE", "b", True))
    return props
