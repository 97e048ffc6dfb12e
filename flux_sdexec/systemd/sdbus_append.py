"""Writing D-Bus values into an sd-bus message, typed by a signature.

``append(m, sig, value)`` covers the types transient unit properties use: basic
types (``h`` is an fd, which sd-bus duplicates at once), arrays (``as`` and ``ay``
in one C call each), structs and variants ``(signature, value)``.
``append_properties`` writes a unit's ``a(sv)``, one C call per property of a
basic type (most of them): six calls and as many Python frames each before.
Raises OSError.
"""

from flux_sdexec.systemd.sdbus import check, ffi, lib

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


# sd_bus_message_append()'s C vararg for each basic type (small integers are promoted)
_VARARG = {
    b"s": lambda v: ffi.new("char[]", _bytes(v)),
    b"o": lambda v: ffi.new("char[]", _bytes(v)),
    b"b": lambda v: ffi.cast("int", bool(v)),
    b"y": lambda v: ffi.cast("int", v),
    b"n": lambda v: ffi.cast("int", v),
    b"q": lambda v: ffi.cast("int", v),
    b"i": lambda v: ffi.cast("int32_t", v),
    b"h": lambda v: ffi.cast("int", v),
    b"u": lambda v: ffi.cast("uint32_t", v),
    b"x": lambda v: ffi.cast("int64_t", v),
    b"t": lambda v: ffi.cast("uint64_t", v),
    b"d": lambda v: ffi.cast("double", v),
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
            _append_strv(m, [_bytes(v) for v in value])
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


def _append_strv(m, strings):
    """``as`` in one C call: the strings laid end to end in one buffer, pointed into."""
    buf = ffi.from_buffer(b"\0".join(strings) + b"\0")
    ptrs = ffi.new("char *[]", len(strings) + 1)
    offset = 0
    for i, s in enumerate(strings):
        ptrs[i] = buf + offset
        offset += len(s) + 1
    check(lib.sd_bus_message_append_strv(m, ptrs), "as")


def append_all(m, sig, values):
    """Append each of ``values`` typed by the successive complete types of ``sig``."""
    for t, v in zip(split(sig), values):
        append(m, t, v)


def append_properties(m, props):
    """Append ``props``, (Name, signature, value) triples, as the ``a(sv)`` of a unit."""
    check(lib.sd_bus_message_open_container(m, b"a", b"(sv)"), "open array")
    for name, sig, value in props:
        sig = _bytes(sig)
        vararg = _VARARG.get(sig)
        if vararg is None:
            append(m, b"(sv)", (name, (sig, value)))
            continue
        name_c = ffi.new("char[]", _bytes(name))
        r = lib.sd_bus_message_append(m, b"(sv)", name_c, ffi.new("char[]", sig), vararg(value))
        check(r, f"append {name}")
    check(lib.sd_bus_message_close_container(m), "close array")
