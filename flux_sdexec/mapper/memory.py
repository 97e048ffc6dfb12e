"""Memory caps scaled to a job's share of a node (pure).

A cap from ``exec.sdexec-properties`` (MemoryHigh, MemoryMax, MemorySwapMax) is
multiplied by allocated PUs / total PUs: ``N%`` becomes ``round(N*ratio)%``, a
size (bytes or K/M/G/T, 1024-based, any case) becomes whole bytes. ``infinity``
and values that do not parse are left alone, as flux-core does. Protections
(MemoryMin, MemoryLow) are per-job guarantees and never scaled.
"""

import math

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


def scale(text, allocated, total):
    """``text`` scaled by allocated/total, or None when it is infinite or unparsable."""
    try:
        value, percent = parse_size(text)
    except ValueError:
        return None
    if math.isinf(value) or math.isnan(value):
        return None
    scaled = value * allocated / total
    return f"{round(scaled)}%" if percent else str(int(scaled))


def scale_caps(extra, allocated, total):
    """The scaled caps among ``extra`` (a dict of property strings), as a dict."""
    out = {}
    if total <= 0:
        return out
    for name in SCALED:
        text = extra.get(name)
        if isinstance(text, str) and text:
            value = scale(text, allocated, total)
            if value is not None:
                out[name] = value
    return out
