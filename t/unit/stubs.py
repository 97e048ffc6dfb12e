"""A stubbed bus for the systemd adapters' own logic (calls.py, sweeper.py, actions.py).

``StubBridge`` records each call sent without waiting, with its ``on_reply``; a test
answers it (``answer``), loses every pending call with the connection (``lose``), or
makes the next send raise (``refuse_next``). ``StubWatchers`` hands out timers (and fd
watchers) a test fires by hand. No flux, no systemd, no sleeping.
"""

import errno

from flux_sdexec.core.errors import UnitError


class StubTimer:
    def __init__(self, after, func, what):
        self.after, self.func, self.what = after, func, what
        self.running = self.destroyed = False

    def start(self):
        self.running = True

    def stop(self):
        self.running = False

    def reset(self, after):
        self.after, self.running = after, True

    def destroy(self):
        self.running, self.destroyed = False, True

    def fire(self):
        assert self.running and not self.destroyed, f"timer {self.what} is not armed"
        self.running = False
        self.func()


class StubFd(StubTimer):
    """An fd watcher: firing it (its fd readable) leaves it started."""

    def fire(self):
        assert self.running and not self.destroyed, f"fd watcher {self.what} is not started"
        self.func()


class StubWatchers:
    def __init__(self):
        self.timers = []
        self.fds = []  # fd watchers: a test fires one as the reactor would when it is readable

    def timer(self, after, func, what):
        t = StubTimer(after, func, what)
        self.timers.append(t)
        return t

    def fd(self, fd, events, func, what):
        w = StubFd(fd, func, what)
        self.fds.append(w)
        return w

    def armed(self):
        return [t for t in self.timers if t.running]

    def shield(self, func, what):
        return func  # a test sees what a callback raises


class StubLog:
    def __init__(self):
        self.lines = []

    def __call__(self, level, text):
        self.lines.append((level, text))

    def debug(self, text):
        self.lines.append(("debug", text))

    def info(self, text):
        self.lines.append(("info", text))

    def warning(self, text):
        self.lines.append(("warning", text))

    def error(self, text):
        self.lines.append(("error", text))

    def at(self, level):
        return [text for lv, text in self.lines if lv == level]


class StubSweeper:
    """The sweeper: what was handed to it, in order."""

    def __init__(self):
        self.swept = []

    def sweep(self, unit, why):
        self.swept.append(unit)

    def __contains__(self, unit):
        return unit in self.swept


class StubBus:
    def __init__(self):
        self.sends = 0

    def sent(self):
        self.sends += 1


class Sent:
    """One call the stub bridge sent: ``member``, ``unit``, ``args``, ``kwargs``."""

    def __init__(self, member, unit, args, kwargs, on_reply):
        self.member, self.unit, self.args, self.kwargs = member, unit, args, kwargs
        self.on_reply = on_reply

    def __repr__(self):
        return f"{self.member}({self.unit}{''.join(', ' + repr(a) for a in self.args)})"


class StubBridge:
    """The hot path's calls of bridge.py, sent without waiting and answered by hand."""

    def __init__(self):
        self.sent = []  # every call, in order
        self.pending = []  # calls not answered yet
        self._refusal = None

    def refuse_next(self, exc):
        """The next send raises ``exc`` instead of going out."""
        self._refusal = exc

    def _call(self, member, unit, *args, on_reply=None, timeout=None, **kwargs):
        assert on_reply is not None and timeout, "sent without waiting, with a deadline"
        if self._refusal is not None:
            exc, self._refusal = self._refusal, None
            raise exc
        call = Sent(member, unit, args, kwargs, on_reply)
        self.sent.append(call)
        self.pending.append(call)

    def start_transient_unit(self, unit, props, on_reply, timeout, aux=()):
        self._call("StartTransientUnit", unit, on_reply=on_reply, timeout=timeout)

    def kill_unit(self, unit, signum, who="main", **kw):
        self._call("KillUnit", unit, signum, **kw)

    def stop_unit(self, unit, **kw):
        self._call("StopUnit", unit, **kw)

    def reset_failed_unit(self, unit, **kw):
        self._call("ResetFailedUnit", unit, **kw)

    def get_unit(self, unit, **kw):
        self._call("GetUnit", unit, **kw)

    def list_units(self, patterns, **kw):
        self._call("ListUnitsByPatterns", tuple(patterns), **kw)

    def get_property(self, unit, name, on_reply, **kw):
        self._call("Get", unit, name, on_reply=on_reply, **kw)

    def answer_with(self, member, result):
        """Answer the oldest pending ``member`` call with ``result`` (a call whose reply
        carries data: ``on_reply(None, result)``)."""
        call = next(c for c in self.pending if c.member == member)
        self.pending.remove(call)
        call.on_reply(None, result)

    def answer(self, member, error=None):
        """Answer the oldest pending ``member`` call: None (success) or a UnitError."""
        call = next(c for c in self.pending if c.member == member)
        self.pending.remove(call)
        call.on_reply(error)

    def lose(self):
        """The connection is lost: every pending call fails with ECONNRESET."""
        pending, self.pending = self.pending, []
        for call in pending:
            call.on_reply(UnitError(errno.ECONNRESET, "lost connection to systemd"))

    def members(self):
        return [c.member for c in self.sent]
