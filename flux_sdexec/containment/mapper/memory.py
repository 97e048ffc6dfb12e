"""Memory caps scaled to a job's share of a node (pure).

A cap from ``exec.sdexec-properties`` (MemoryHigh, MemoryMax, MemorySwapMax) is
multiplied by allocated PUs / total PUs. A size (bytes or K/M/G/T, 1024-based, any case)
becomes whole bytes. ``N%`` becomes bytes too: N% of the memory systemd scales percentages
by (``physical()``, MemTotal or a container's limit), times the share, rounded down to a page
as systemd rounds, computed exactly and never 0 for a share above 0. flux-core writes
``round(N*share)%`` instead, which is 0% for 50% on a 1-PU job of a 128-PU node; and a
fraction such as ``0.390625%`` would be exact only until a daemon-reload, when systemd
252 re-reads its own ``MemoryMax=0.39%``. ``infinity``, negative percentages and values
that do not parse are left alone, as flux-core does. Protections (MemoryMin, MemoryLow) are
per-job guarantees and never scaled.
"""

import math
from fractions import Fraction

from flux_sdexec.containment import hostlimits

SCALED = ("MemoryHigh", "MemoryMax", "MemorySwapMax")
_SUFFIXES = {"K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def parse_size(text):
    """A systemd memory value: returns (value, is_percent); ``math.inf`` for infinity.

    Raises:
        ValueError: not a size, percentage or infinity.
    """
    s = text.strip()
    if s.lower() in ("infinity", "inf"):
        return math.inf, False
    try:
        if s.endswith("%"):
            return float(s[:-1]), True
        if s[-1:].upper() in _SUFFIXES:
            return float(s[:-1]) * _SUFFIXES[s[-1].upper()], False
        return float(s), False
    except ValueError:
        raise ValueError(f"invalid memory size: {text!r}") from None


def scale(text, allocated, total, physical):
    """``text`` scaled by allocated/total as bytes, or None when infinite or unparsable.

    ``physical()`` returns ``(bytes, page size)`` of the memory systemd scales ``N%`` by;
    it is called for a percentage only.
    """
    try:
        value, percent = parse_size(text)
    except ValueError:
        return None
    if math.isinf(value) or math.isnan(value):
        return None
    if not percent:
        return str(int(value * allocated / total))
    if value < 0:
        return None
    memory, page = physical()
    return str(hostlimits.memory_share(memory, page, Fraction(text.strip()[:-1]), allocated, total))


def scale_caps(extra, allocated, total, physical):
    """The scaled caps among ``extra`` (a dict of property strings), as a dict."""
    out = {}
    if total <= 0:
        return out
    for name in SCALED:
        text = extra.get(name)
        if isinstance(text, str) and text:
            value = scale(text, allocated, total, physical)
            if value is not None:
                out[name] = value
    return out
