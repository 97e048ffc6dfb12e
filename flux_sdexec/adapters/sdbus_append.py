"""Writing D-Bus values into an sd-bus message, typed by a signature.

``append(m, sig, value)`` covers the types transient unit properties use: basic
types (``h`` is an fd, which sd-bus duplicates at once), arrays (``as`` and ``ay``
in one C call each), structs and variants ``(signature, value)``. Raises OSError.
"""

from flux_sdexec.adapters.sdbus import check, ffi, lib

_CTYPE = {
    b"y": "uint8_t *",
    b"b": "int *",
    b"n": "int16_t *",
    b"q": "uint16_t *",
    b"i": "int32_t *",
    b"u": "uint32_t *",
    b"x": "int64_t *",
    b"t": "uint64_t *",
    b"d": "double *",
    b"h": "int *",
}


def _end(sig, i):
    """Index just past the single complete type starting at sig[i]."""
    c = sig[i : i + 1]
    if c == b"a":
        return _end(sig, i + 1)
    if c in (b"(", b"{"):
        depth = 0
        for j in range(i, len(sig)):
            if sig[j] in b"({":
                depth += 1
            elif sig[j] in b")}":
                depth -= 1
                if depth == 0:
                    return j + 1
        raise ValueError(f"unbalanced signature {sig!r}")
    return i + 1


def split(sig):
    """The complete types of a signature, in order."""
    types, i = [], 0
    while i < len(sig):
        j = _end(sig, i)
        types.append(sig[i:j])
        i = j
    return types


def _bytes(v):
    return v.encode() if isinstance(v, str) else v


def append(m, sig, value):
    """Append ``value`` as the single complete type ``sig`` (bytes) to message ``m``."""
    c = sig[:1]
    if c == b"a":
        inner = sig[1:]
        if inner == b"s":
            keep = [ffi.new("char[]", _bytes(v)) for v in value]
            check(lib.sd_bus_message_append_strv(m, ffi.new("char *[]", keep + [ffi.NULL])), "as")
            return
        if inner == b"y":
            data = bytes(value)
            check(lib.sd_bus_message_append_array(m, b"y", data, len(data)), "ay")
            return
        check(lib.sd_bus_message_open_container(m, b"a", inner), "open array")
        for v in value.items() if isinstance(value, dict) else value:
            append(m, inner, v)
        check(lib.sd_bus_message_close_container(m), "close array")
    elif c in (b"(", b"{"):
        check(lib.sd_bus_message_open_container(m, b"r" if c == b"(" else b"e", sig[1:-1]), "open")
        for t, v in zip(split(sig[1:-1]), value):
            append(m, t, v)
        check(lib.sd_bus_message_close_container(m), "close")
    elif c == b"v":
        vsig, v = value
        vsig = _bytes(vsig)
        check(lib.sd_bus_message_open_container(m, b"v", vsig), "open variant")
        append(m, vsig, v)
        check(lib.sd_bus_message_close_container(m), "close variant")
    elif c in (b"s", b"o", b"g"):
        check(lib.sd_bus_message_append_basic(m, c, _bytes(value)), "append string")
    else:
        check(lib.sd_bus_message_append_basic(m, c, ffi.new(_CTYPE[c], value)), "append")


def append_all(m, sig, values):
    """Append each of ``values`` typed by the successive complete types of ``sig``."""
    for t, v in zip(split(sig), values):
        append(m, t, v)
