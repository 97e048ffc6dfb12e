"""A small cffi binding of libsystemd's sd-bus (ABI mode: no compiler needed).

Only what the hot path needs: a connection, matches with a NULL callback (so
``sd_bus_process`` hands the matching message back instead of calling Python from
C), method calls sent without waiting (their replies come out of ``process()``,
matched by cookie) or, for the rare blocking case, ``sd_bus_call``. Building
message bodies is in sdbus_append.py, reading PropertiesChanged in sdbus_props.py.
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
