"""One guard around every reactor callback.

flux's watcher trampolines stop the reactor with an error when a callback
raises, which would end the module. Every fd, timer and signal watcher the
adapters create comes from ``Watchers``, whose callbacks log an exception and
return. With ``serve()`` (request handlers) this is the package's only broad
``except``.
"""


def guarded(log, what, func):
    """``func`` as a watcher callback that logs what it raises instead of raising."""

    def callback(*args):
        try:
            func(*args)
        except Exception as exc:
            log.error(f"{what}: {exc!r}")

    return callback


class Watchers:
    """Creates guarded flux watchers (not started) on one handle."""

    def __init__(self, handle, log):
        self._h = handle
        self._log = log

    def fd(self, fd, events, func, what):
        """An fd watcher calling ``func()`` when ``fd`` has ``events``."""
        return self._h.fd_watcher_create(
            fd, guarded(self._log, what, lambda *args: func()), events=events
        )

    def timer(self, after, func, what):
        """A one-shot timer calling ``func()`` after ``after`` seconds (re-arm with reset)."""
        return self._h.timer_watcher_create(after, guarded(self._log, what, lambda *args: func()))

    def signal(self, signum, func, what):
        """A signal watcher calling ``func()`` on ``signum``."""
        return self._h.signal_watcher_create(signum, guarded(self._log, what, lambda *args: func()))
