"""StartTransientUnit and KillUnit carried through lost replies and stalls (settle.py).

``Calls.start()`` and ``Calls.kill()`` send a call without waiting and answer
``on_done(error)`` exactly once: None when systemd took it, a UnitError when it refused
or when the budget (``[sdexec] systemd-timeout``) ran out. In between, each attempt
waits at most ``settle.call_deadline(budget)``; a reply lost to a reconnect waits for
``reconnected()``; both then look the unit up and carry on or send again, as settle.Call
orders. After a start is taken its budget still runs until ``started()`` (its process
runs, or the exec is over): ``on_late()`` then fails a start job systemd keeps queued.
A send that raises anything else (a value sd-bus cannot take, such as a lone surrogate
from a Python client) is the call's answer too: EINVAL, never a second one later.
"""

import errno
import time

from flux_sdexec.core import settle
from flux_sdexec.core.errors import UnitError


class _Driver:
    """Carries out one settle.Call's orders on the bridge."""

    def __init__(self, calls, member, unit, send, on_done, on_late=None):
        self.calls = calls
        self.unit = unit
        self.call = settle.Call(member, calls.budget, time.monotonic())
        self._send = send  # send(on_reply, timeout): one attempt
        self._on_done = on_done
        self._on_late = on_late
        self._timer = calls.watchers.timer(calls.budget, self._expired, unit)
        self._timer.start()

    def _order(self, order):
        calls = self.calls
        try:
            if order == settle.SEND:
                self._send(self._replied, calls.deadline())
            elif order == settle.LOOKUP:
                calls.bridge.get_unit(self.unit, on_reply=self._looked_up, timeout=calls.deadline())
            elif order == settle.AWAIT_RECONNECT:
                calls.waiting.add(self)
            else:
                self._done()
                return
        except UnitError as exc:  # not sent: the connection is gone, or closed
            self._order(self.call.replied(exc.errno, exc.strerror))
            return
        except Exception as exc:  # not sendable (UnicodeEncodeError, or a bug): refused
            if not isinstance(exc, UnicodeError):
                calls.log.error(f"{self.unit}: {self.call.member}: {exc!r}")
            self._order(self.call.replied(errno.EINVAL, f"{self.call.member}: {exc}"))
            return
        calls.bus.sent()

    def go(self):
        self._order(self.call.sending())

    def _replied(self, exc):
        if self.call.settled:
            return
        order = self.call.replied(*((None,) if exc is None else (exc.errno, exc.strerror)))
        if order == settle.LOOKUP:
            what = f"no reply to {self.call.member} within {self.calls.deadline():g}s"
            self.calls.log.warning(f"{self.unit}: {what}, looking the unit up")
        self._order(order)

    def _looked_up(self, exc):
        if self.call.settled:
            return
        order = self.call.looked_up(None if exc is None else exc.errno)
        if order == settle.SEND:
            self.calls.log.info(f"{self.unit}: {self.call.member} sent again ({self.call.last})")
        self._order(order)

    def reconnected(self):
        if not self.call.settled:
            self._order(self.call.reconnected())

    def _expired(self):
        if not self.call.settled:
            self._order(self.call.expired(time.monotonic()))
        elif self._on_late is not None:
            on_late, self._on_late = self._on_late, None
            on_late(self.call.budget, time.monotonic() - self.call.began)

    def _done(self):
        self.calls.waiting.discard(self)
        if self.call.error is not None or self._on_late is None:
            self.destroy()  # nothing more to watch
        self._on_done(None if self.call.error is None else UnitError(*self.call.error))

    def unsettle(self, errnum, text):
        """Unloading: answer now if not settled yet."""
        if not self.call.settled:
            self.call.settled = True
            self._on_done(UnitError(errnum, text))
        self.destroy()

    def destroy(self):
        self._on_late = None  # nothing is late once the driver is over
        self.calls.live.discard(self)
        self.calls._forget_start(self)
        if self._timer is not None:
            self._timer.stop()
            self._timer.destroy()
            self._timer = None


class Calls:
    """Args:
    bridge: the SystemdBridge.
    bus: its BusWatcher (``sent()`` after each call).
    watchers: a ``watchers.Watchers`` (the budget timers).
    log: the module's BrokerLogger.
    budget: ``[sdexec] systemd-timeout`` in seconds.
    """

    def __init__(self, bridge, bus, watchers, log, budget=settle.DEFAULT_BUDGET):
        self.bridge = bridge
        self.bus = bus
        self.watchers = watchers
        self.log = log
        self.budget = budget
        self.waiting = set()  # drivers whose reply was lost with the connection
        self.live = set()  # drivers with a budget timer
        self._starts = {}  # unit -> its start's driver, until started()

    def deadline(self):
        """How long one attempt waits for its reply (settle.call_deadline)."""
        return settle.call_deadline(self.budget)

    def start(self, unit, props, on_done, on_late, aux=()):
        """StartTransientUnit(unit, props, aux), settled: ``on_done(error)`` once; then, if
        the budget runs out before ``started(unit)``, ``on_late(budget, waited)``."""

        def send(on_reply, timeout):
            self.bridge.start_transient_unit(unit, props, on_reply, timeout, aux)

        driver = _Driver(self, settle.START, unit, send, on_done, on_late)
        self._starts[unit] = driver  # before it is sent: a refusal may settle it at once
        self._go(driver)

    def start_unsettled(self, unit):
        """The unit's start is not settled yet: systemd may not have the unit."""
        driver = self._starts.get(unit)
        return driver is not None and not driver.call.settled

    def started(self, unit):
        """The unit's process runs, or its exec is over: its start budget stops."""
        driver = self._starts.get(unit)
        if driver is not None:
            driver.destroy()

    def _forget_start(self, driver):
        """``driver`` (a start's, or a kill's) is over: it is no unit's start any more."""
        if self._starts.get(driver.unit) is driver:
            del self._starts[driver.unit]

    def kill(self, unit, signum, on_done):
        """KillUnit(unit, "main", signum), settled: ``on_done(error)`` once."""

        def send(on_reply, timeout):
            self.bridge.kill_unit(unit, signum, on_reply=on_reply, timeout=timeout)

        self._go(_Driver(self, settle.KILL, unit, send, on_done))

    def _go(self, driver):
        self.live.add(driver)
        driver.go()

    def reconnected(self):
        """The connection is back: every call whose reply was lost looks its unit up."""
        waiting, self.waiting = self.waiting, set()
        for driver in waiting:
            driver.reconnected()

    def close(self, errnum, text):
        """Unloading: every call not settled is answered ``(errnum, text)``; timers go."""
        for driver in list(self.live):
            driver.unsettle(errnum, text)
        self._starts.clear()
        self.waiting.clear()
