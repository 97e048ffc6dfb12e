"""Reading only the tracked properties of a PropertiesChanged signal (sa{sv}as), or of a
GetAll answer (a{sv}: every property of a unit, read after a reconnect).

A Service signal carries ~17 properties and a Unit signal ~22, changed or not;
sdexec reads six. The first signal of each interface is walked entry by entry to
learn its layout; after that a signal is decoded by a fixed program: one
``sd_bus_message_skip("{sv}{sv}...")`` per run of untracked entries and one
``sd_bus_message_read("{sv}...")`` per run of tracked ones, in C. Keys are checked
after each read, and a variant of another type makes the read fail, so a layout
that changed (a new systemd, another property set) is learnt again.
"""

from flux_sdexec.systemd.sdbus import ffi, lib

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
