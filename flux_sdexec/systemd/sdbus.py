"""A small cffi binding of libsystemd's sd-bus (ABI mode: no compiler needed).

Only what the hot path needs, in the order of this file:

- The declarations and the library; a negative return code as OSError (``check``), a
  method error reply as (errno, message) (``reply_error``).
- ``Bus``, one connection: matches with a NULL callback (so ``sd_bus_process`` hands the
  matching message back instead of calling Python from C), method calls sent without
  waiting (their replies come out of ``process()``, matched by cookie) or, for the rare
  blocking case, ``sd_bus_call``.
- Building message bodies, typed by a signature: ``append(m, sig, value)`` covers the
  types transient unit properties use: basic types (``h`` is an fd, which sd-bus
  duplicates at once), arrays (``as`` and ``ay`` in one C call each), structs and variants
  ``(signature, value)``. ``append_properties`` writes a unit's ``a(sv)``, one C call per
  property of a basic type (most of them): six calls and as many Python frames each
  before. Raises OSError.
- Reading: a ListUnits reply (``read_unit_list``), and only the tracked properties of a
  PropertiesChanged signal (sa{sv}as), or of a GetAll answer (a{sv}: every property of a
  unit, read after a reconnect), with ``PropsDecoder``. A Service signal carries ~17
  properties and a Unit signal ~22, changed or not; sdexec reads six. The first signal of
  each interface is walked entry by entry to learn its layout; after that a signal is
  decoded by a fixed program: one ``sd_bus_message_skip("{sv}{sv}...")`` per run of
  untracked entries and one ``sd_bus_message_read("{sv}...")`` per run of tracked ones,
  in C. Keys are checked after each read, and a variant of another type makes the read
  fail, so a layout that changed (a new systemd, another property set) is learnt again.
"""

import errno
import os

from cffi import FFI

ffi = FFI()
ffi.cdef("""
typedef struct sd_bus sd_bus;
typedef struct sd_bus_message sd_bus_message;
typedef struct sd_bus_slot sd_bus_slot;
typedef struct { const char *name; const char *message; int _need_free; } sd_bus_error;
typedef int (*sd_bus_message_handler_t)(sd_bus_message *, void *, sd_bus_error *);

int sd_bus_new(sd_bus **ret);
int sd_bus_set_address(sd_bus *bus, const char *address);
int sd_bus_start(sd_bus *bus);
sd_bus *sd_bus_unref(sd_bus *bus);
int sd_bus_open_user(sd_bus **ret);
int sd_bus_open_system(sd_bus **ret);
sd_bus *sd_bus_flush_close_unref(sd_bus *bus);
void sd_bus_close(sd_bus *bus);
int sd_bus_get_fd(sd_bus *bus);
int sd_bus_get_events(sd_bus *bus);
int sd_bus_process(sd_bus *bus, sd_bus_message **r);
int sd_bus_add_match(sd_bus *bus, sd_bus_slot **slot, const char *match,
                     sd_bus_message_handler_t callback, void *userdata);
int sd_bus_add_match_async(sd_bus *bus, sd_bus_slot **slot, const char *match,
                           sd_bus_message_handler_t callback,
                           sd_bus_message_handler_t install_callback, void *userdata);
sd_bus_slot *sd_bus_slot_unref(sd_bus_slot *slot);
int sd_bus_message_new_method_call(sd_bus *bus, sd_bus_message **m, const char *destination,
                                   const char *path, const char *interface, const char *member);
int sd_bus_send(sd_bus *bus, sd_bus_message *m, uint64_t *cookie);
int sd_bus_call(sd_bus *bus, sd_bus_message *m, uint64_t usec, sd_bus_error *ret_error,
                sd_bus_message **reply);
void sd_bus_error_free(sd_bus_error *e);

int sd_bus_message_append(sd_bus_message *m, const char *types, ...);
int sd_bus_message_append_basic(sd_bus_message *m, char type, const void *p);
int sd_bus_message_append_array(sd_bus_message *m, char type, const void *ptr, size_t size);
int sd_bus_message_append_strv(sd_bus_message *m, char **l);
int sd_bus_message_open_container(sd_bus_message *m, char type, const char *contents);
int sd_bus_message_close_container(sd_bus_message *m);

int sd_bus_message_get_type(sd_bus_message *m, uint8_t *type);
int sd_bus_message_get_reply_cookie(sd_bus_message *m, uint64_t *cookie);
const char *sd_bus_message_get_path(sd_bus_message *m);
int sd_bus_message_is_signal(sd_bus_message *m, const char *interface, const char *member);
const sd_bus_error *sd_bus_message_get_error(sd_bus_message *m);
int sd_bus_message_get_errno(sd_bus_message *m);
int sd_bus_message_read_basic(sd_bus_message *m, char type, void *p);
int sd_bus_message_read(sd_bus_message *m, const char *types, ...);
int sd_bus_message_skip(sd_bus_message *m, const char *types);
int sd_bus_message_enter_container(sd_bus_message *m, char type, const char *contents);
int sd_bus_message_exit_container(sd_bus_message *m);
int sd_bus_message_peek_type(sd_bus_message *m, char *type, const char **contents);
int sd_bus_message_rewind(sd_bus_message *m, int complete);
sd_bus_message *sd_bus_message_unref(sd_bus_message *m);
""")
lib = ffi.dlopen("libsystemd.so.0")

METHOD_RETURN, METHOD_ERROR, SIGNAL = 2, 3, 4
DISCONNECTED = {errno.ECONNRESET, errno.ENOTCONN, errno.EPIPE, errno.ESHUTDOWN}


def check(r, what):
    """An sd-bus return code, or OSError for a negative one."""
    if r < 0:
        raise OSError(-r, f"{what}: {os.strerror(-r)}")
    return r


def text(p):
    """A C string (possibly NULL) as str."""
    return ffi.string(p).decode("utf-8", "replace") if p != ffi.NULL else ""


def reply_error(m):
    """(errno, message) of a method error reply; the errno is sd-bus's mapping of its name."""
    code = lib.sd_bus_message_get_errno(m) or errno.EIO
    return code, text(lib.sd_bus_message_get_error(m).message) or os.strerror(code)


# ---- the connection ----


class Bus:
    """One sd-bus connection: to the user or system bus, or straight to a peer at
    ``address`` (a D-Bus address such as ``unix:path=...``). Raises OSError on failure."""

    def __init__(self, user_mode=True, address=None):
        busp = ffi.new("sd_bus **")
        if address is None:
            opener = lib.sd_bus_open_user if user_mode else lib.sd_bus_open_system
            check(opener(busp), "open bus")
        else:
            check(lib.sd_bus_new(busp), "new bus")
            r = lib.sd_bus_set_address(busp[0], address)
            if r >= 0:
                r = lib.sd_bus_start(busp[0])
            if r < 0:
                lib.sd_bus_unref(busp[0])
                check(r, f"connect to {address.decode(errors='replace')}")
        self.bus = busp[0]
        self._msgp = ffi.new("sd_bus_message **")
        self._cookiep = ffi.new("uint64_t *")
        self._typep = ffi.new("uint8_t *")
        self._slots = set()  # sd_bus_slot * of our matches

    def close(self, flush=True):
        """Close the connection, then drop our matches (each held a reference to it).
        ``flush=False``: what is still queued is dropped, never waited for (a stalled peer)."""
        if self.bus is not None:
            if flush:
                lib.sd_bus_flush_close_unref(self.bus)
            else:
                lib.sd_bus_close(self.bus)
                lib.sd_bus_unref(self.bus)
            self.bus = None
            for slot in self._slots:
                lib.sd_bus_slot_unref(slot)
            self._slots.clear()

    def fileno(self):
        return check(lib.sd_bus_get_fd(self.bus), "bus fd")

    def events(self):
        """The poll events sd-bus waits for (POLLOUT while its write queue is not empty)."""
        return lib.sd_bus_get_events(self.bus)

    def add_match(self, rule, wait=True):
        """Install a match whose messages come back from process() (NULL callback); its slot.

        On a bus, the rule is also the bus daemon's filter (AddMatch): waited for, or with
        ``wait=False`` sent without waiting (its failure then closes the connection). On a
        direct connection the peer sends everything and the rule filters nothing.
        """
        slotp = ffi.new("sd_bus_slot **")
        if wait:
            r = lib.sd_bus_add_match(self.bus, slotp, rule, ffi.NULL, ffi.NULL)
        else:
            r = lib.sd_bus_add_match_async(self.bus, slotp, rule, ffi.NULL, ffi.NULL, ffi.NULL)
        check(r, "add match")
        self._slots.add(slotp[0])
        return slotp[0]

    def remove_match(self, slot):
        """Drop a match of add_match() (on a bus, RemoveMatch is sent without waiting)."""
        if slot in self._slots:
            self._slots.discard(slot)
            lib.sd_bus_slot_unref(slot)

    def new_call(self, dest, path, iface, member):
        """A method call message (owned: unref'd when collected)."""
        mp = ffi.new("sd_bus_message **")
        r = lib.sd_bus_message_new_method_call(self.bus, mp, dest, path, iface, member)
        check(r, "new method call")
        return ffi.gc(mp[0], lib.sd_bus_message_unref)

    def send(self, m):
        """Queue ``m`` without waiting; the cookie its reply will carry."""
        check(lib.sd_bus_send(self.bus, m, self._cookiep), "send")
        return self._cookiep[0]

    def call(self, m, usec=0):
        """Send ``m`` and wait for its reply (usec 0: sd-bus's default timeout).

        Other messages read meanwhile stay queued for process(). Raises OSError with the
        error reply's errno and message.
        """
        err = ffi.new("sd_bus_error *")
        reply = ffi.new("sd_bus_message **")
        try:
            r = lib.sd_bus_call(self.bus, m, usec, err, reply)
            if r < 0:
                raise OSError(-r, text(err.message) or os.strerror(-r))
            lib.sd_bus_message_unref(reply[0])
        finally:
            lib.sd_bus_error_free(err)

    def process(self):
        """One step: (returned, message or NULL, type, reply cookie). The caller unrefs
        the message; returned 0 means nothing is left to do for now."""
        msgp = self._msgp
        r = check(lib.sd_bus_process(self.bus, msgp), "process")
        m = msgp[0]
        if m == ffi.NULL:
            return r, m, 0, 0
        msgp[0] = ffi.NULL
        lib.sd_bus_message_get_type(m, self._typep)
        kind = self._typep[0]
        if kind == SIGNAL:
            return r, m, kind, 0
        lib.sd_bus_message_get_reply_cookie(m, self._cookiep)
        return r, m, kind, self._cookiep[0]


def path_encode(prefix, name):
    """systemd's object path of a unit: bytes other than [A-Za-z0-9] (and a leading digit)
    become _xx; an empty name is "_"."""
    out = []
    for i, c in enumerate(name.encode()):
        if (65 <= c <= 90 or 97 <= c <= 122) or (i > 0 and 48 <= c <= 57):
            out.append(chr(c))
        else:
            out.append(f"_{c:02x}")
    return prefix + b"/" + ("".join(out) or "_").encode()


# ---- building message bodies ----

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


# ---- reading ----

_UNIT_ROW = b"(ssssssouso)"  # ListUnits*: name, description, load, active, sub, ...


def read_unit_list(m):
    """A ListUnits/ListUnitsByPatterns reply: ``[(name, ActiveState, SubState)]``."""
    strs = [ffi.new("const char **") for _ in range(9)]
    job = ffi.new("uint32_t *")
    check(lib.sd_bus_message_enter_container(m, b"a", _UNIT_ROW), "read unit list")
    units = []
    while check(lib.sd_bus_message_read(m, _UNIT_ROW, *strs[:7], job, *strs[7:]), "read unit"):
        units.append((text(strs[0][0]), text(strs[3][0]), text(strs[4][0])))
    check(lib.sd_bus_message_exit_container(m), "read unit list")
    return units


# the basic types a tracked property may have, and how to read them back
_VALUE = {
    b"s": ("const char *[1]", lambda p: ffi.string(p[0]).decode("utf-8", "replace")),
    b"o": ("const char *[1]", lambda p: ffi.string(p[0]).decode("utf-8", "replace")),
    b"u": ("uint32_t[1]", lambda p: p[0]),
    b"i": ("int32_t[1]", lambda p: p[0]),
    b"t": ("uint64_t[1]", lambda p: p[0]),
    b"x": ("int64_t[1]", lambda p: p[0]),
    b"b": ("int[1]", lambda p: bool(p[0])),
}


def read_variant(m):
    """A Properties.Get answer: the value its variant holds (one of the basic types above)."""
    typep, contents = ffi.new("char *"), ffi.new("const char **")
    check(lib.sd_bus_message_peek_type(m, typep, contents), "read variant")
    sig = ffi.string(contents[0]) if contents[0] != ffi.NULL else b""
    if sig not in _VALUE:
        raise OSError(errno.EPROTO, f"a variant of type {sig!r}")
    ctype, convert = _VALUE[sig]
    valp = ffi.new(ctype)
    check(lib.sd_bus_message_enter_container(m, b"v", sig), "read variant")
    check(lib.sd_bus_message_read_basic(m, sig, valp), "read variant")
    return convert(valp)


def _rewind(m, head):
    lib.sd_bus_message_rewind(m, 1)
    if head:
        lib.sd_bus_message_skip(m, head)


GETALL = b"*GetAll"  # the layout of a GetAll answer of every interface (no D-Bus name)


class PropsDecoder:
    """``decode(m) -> (interface, {name: value})``: the ``tracked`` names present in
    signal ``m``, and the interface whose properties it carries."""

    def __init__(self, tracked):
        self._tracked = {name.encode(): name for name in tracked}
        self._programs = {}  # interface (or GETALL) -> program (see _learn)
        self._strp = ffi.new("const char **")
        self._typep = ffi.new("char *")
        self.relearnt = 0  # layouts learnt again after a mismatch (tests, debugging)

    def decode(self, m):
        if lib.sd_bus_message_read_basic(m, b"s", self._strp) <= 0:
            return b"", {}
        iface = ffi.string(self._strp[0])
        return iface, self._decode(m, iface, b"s")

    def decode_all(self, m):
        """A GetAll answer (a{sv}): ``{name: value}`` of the tracked names present."""
        return self._decode(m, GETALL, b"")

    def _decode(self, m, layout, head):
        """The a{sv} after ``head`` by the program of ``layout``, learnt if it does not fit."""
        program = self._programs.get(layout)
        if program is not None:
            out = self._run(m, program)
            if out is not None:
                return out
            self.relearnt += 1
        _rewind(m, head)
        program = self._programs[layout] = self._learn(m)
        _rewind(m, head)
        return self._run(m, program) or {}

    def _learn(self, m):
        """Walk the a{sv}; a program of (format, args, checks) steps, args None for a skip."""
        strp = self._strp
        entries = []
        lib.sd_bus_message_enter_container(m, b"a", b"{sv}")
        while lib.sd_bus_message_enter_container(m, b"e", b"sv") > 0:
            lib.sd_bus_message_read_basic(m, b"s", strp)
            key = ffi.string(strp[0])
            lib.sd_bus_message_peek_type(m, self._typep, strp)
            entries.append((key, ffi.string(strp[0])))
            lib.sd_bus_message_skip(m, b"v")
            lib.sd_bus_message_exit_container(m)
        program, gap, run = [], 0, []
        for key, vsig in entries:
            if key in self._tracked and vsig in _VALUE:
                if gap:
                    program += self._read_step(run) + [(b"{sv}" * gap, None, None)]
                    run, gap = [], 0
                run.append((key, vsig))
            else:
                gap += 1
        return tuple(program + self._read_step(run))

    def _read_step(self, run):
        if not run:
            return []
        args, checks = [], []
        for key, vsig in run:
            ctype, convert = _VALUE[vsig]
            keyp, valp = ffi.new("const char *[1]"), ffi.new(ctype)
            args += [keyp, ffi.new("char[]", vsig), valp]
            checks.append((keyp, key, self._tracked[key], valp, convert))
        return [(b"{sv}" * len(run), tuple(args), tuple(checks))]

    @staticmethod
    def _run(m, program):
        """Decode with ``program``; None when the signal does not fit it."""
        if lib.sd_bus_message_enter_container(m, b"a", b"{sv}") <= 0:
            return None
        read, skip = lib.sd_bus_message_read, lib.sd_bus_message_skip
        out = {}
        for fmt, args, checks in program:
            if args is None:
                if skip(m, fmt) < 0:
                    return None
                continue
            if read(m, fmt, *args) <= 0:
                return None
            for keyp, key, name, valp, convert in checks:
                if ffi.string(keyp[0]) != key:
                    return None
                out[name] = convert(valp)
        return out
