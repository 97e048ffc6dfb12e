"""One guard around every reactor callback, on watchers that cost little per event.

flux's watcher trampolines stop the reactor with an error when a callback
raises, which would end the module. Every fd, timer, handle and signal watcher
the adapters create comes from ``Watchers``, whose callbacks log an exception
and return. With ``serve()`` (request handlers) this is the package's only
broad ``except``.

The fd, timer and handle watchers are made with the C API directly: flux's
Python FDWatcher looks its fd up through the bindings' wrapper layer on every
event, and its start/stop go through that layer too (several µs each, a dozen
times per launch and once per output read).
"""

from flux.core.inner import ffi, lib
from flux.core.watchers import Watcher


def shielded(log, what, func):
    """``func`` as a watcher callback that logs what it raises instead of raising."""

    def callback(*args):
        try:
            func(*args)
        except Exception as exc:
            log.error(f"{what}: {exc!r}")

    return callback


class _Watcher(Watcher):
    """A flux watcher calling ``func()``; ``create(reactor, callback, arg)`` makes it.

    Every watcher type shares flux's callback signature, so the bindings' timer
    trampoline (which passes no fd) serves them all.
    """

    def __init__(self, h, create, func):
        self.callback = lambda *args: func()
        self.args = None
        self.wargs = ffi.new_handle(self)
        reactor = lib.flux_get_reactor(h.handle)
        super().__init__(h, create(reactor, lib.timeout_handler_wrapper, self.wargs))

    def start(self):
        lib.flux_watcher_start(self.handle)
        return self

    def stop(self):
        lib.flux_watcher_stop(self.handle)
        return self

    def reset(self, after):
        """Timers only: fire once, ``after`` seconds from now (stopped first: libev ignores a
        new time set on an active timer)."""
        lib.flux_watcher_stop(self.handle)
        lib.flux_timer_watcher_reset(self.handle, float(after), 0.0)
        lib.flux_watcher_start(self.handle)

    def destroy(self):
        if getattr(self, "handle", None) is not None:
            self.flux_handle.del_watcher(self)
            lib.flux_watcher_destroy(self.handle)
            self.handle = None


# the C constructor of each watcher kind: create(reactor, *args, callback, arg)
_CREATE = {
    "fd": lib.flux_fd_watcher_create,  # args: fd, events
    "timer": lib.flux_timer_watcher_create,  # args: after, repeat
    "handle": lib.flux_handle_watcher_create,  # args: flux_t *, events
}


class Watchers:
    """Creates shielded flux watchers (not started) on one handle."""

    def __init__(self, handle, log):
        self._h = handle
        self._log = log

    def fd(self, fd, events, func, what):
        """An fd watcher calling ``func()`` when ``fd`` has ``events``."""
        return self._make("fd", (fd, events), shielded(self._log, what, func))

    def timer(self, after, func, what):
        """A one-shot timer calling ``func()`` after ``after`` seconds (re-arm with reset)."""
        return self._make("timer", (float(after), 0.0), shielded(self._log, what, func))

    def handle(self, events, func, what):
        """A watcher of the flux handle itself (POLLOUT: it can send again)."""
        return self._make("handle", (self._h.handle, events), shielded(self._log, what, func))

    def signal(self, signum, func, what):
        """A signal watcher calling ``func()`` on ``signum``."""
        return self._h.signal_watcher_create(
            signum, shielded(self._log, what, lambda *args: func())
        )

    def shield(self, func, what):
        """``func`` as a future's ``then`` callback that logs what it raises."""
        return shielded(self._log, what, func)

    def _make(self, kind, args, func):
        """A watcher of ``kind`` calling ``func()``, not started."""
        create = _CREATE[kind]
        return _Watcher(self._h, lambda r, cb, arg: create(r, *args, cb, arg), func)
