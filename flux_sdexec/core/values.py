"""Value syntaxes of command options: sizes, percentages, RFC 22 idsets.

Pure: stdlib only. Errors are ``Bad`` (a ValueError); the caller names the option.
"""

import re

UINT64_MAX = 2**64 - 1
IDSET_MAX_ID = 1 << 20  # refuse absurd ids rather than build a huge bitmask
_SIZE_SUFFIX = {"": 0, "k": 10, "K": 10, "M": 20, "G": 30, "T": 40, "P": 50, "E": 60}


class Bad(ValueError):
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
            raise Bad(f"{text!r} is not a size")
    except ValueError as exc:
        raise Bad(f"{text!r} is not a size") from exc
    value = int(value * (1 << _SIZE_SUFFIX[suffix]))
    if value > UINT64_MAX:
        raise Bad(f"{text!r} is too large")
    return value


def percent(text):
    """The N of ``N%`` (0 <= N <= 100, fraction allowed), or None if no ``%``."""
    if not text.endswith("%"):
        return None
    try:
        value = float(text[:-1])
    except ValueError as exc:
        raise Bad(f"{text!r} is not a percentage") from exc
    if not 0 <= value <= 100 or text.count("%") != 1:
        raise Bad(f"{text!r} is not a percentage from 0 to 100")
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
            raise Bad(f"{text!r} is not an idset")
        first, last = int(lo), int(hi or lo)
        if first > last or last > IDSET_MAX_ID:
            raise Bad(f"{text!r} is not a usable idset")
        ids.update(range(first, last + 1))
    return sorted(ids)


def encode_idset(ids):
    """Sorted ids as an RFC 22 idset with ranges (``0-3,8``), ``""`` when empty."""
    parts, ids = [], sorted(set(ids))
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)


def idset_bitmask(text):
    """systemd's ``ay`` CPU/NUMA mask: byte i holds ids 8i..8i+7, LSB first."""
    ids = parse_idset(text)
    mask = bytearray((ids[-1] // 8 + 1) if ids else 0)
    for i in ids:
        mask[i // 8] |= 1 << (i % 8)
    return bytes(mask)
