"""Making systemd forget units when nobody will be watching them any more.

Used at unload, after the reactor has stopped, and for leftovers that cannot be
adopted. StopUnit only starts a stop, and a unit that ends failed stays loaded
until ResetFailedUnit; so this polls the bus itself, within a bounded grace.
"""

import errno
import select
import signal
import time

from flux_sdexec.core.errors import UnitError
from flux_sdexec.core.settle import reconnect_delay
from flux_sdexec.core.unitstate import forget_call

UNLOAD_GRACE = 2.0  # seconds a unit may take to stop before it is SIGKILLed
RECONNECT_TRIES = 12  # at unload: ~2 s of reconnect_delay pauses in all


def quietly(log, call, *args):
    """Make a systemd call whose failure only matters for debugging."""
    try:
        call(*args)
    except UnitError as exc:
        log.debug(f"{call.__name__} {args[0]}: {exc}")


def release_now(bridge, log, unit, active_state, mode="replace", keeper=None):
    """The calls of the forget policy (unitstate.forget_call) for a unit nobody will watch:
    a stopped unit may end failed, so the reset follows the stop. Mode "replace" stops a
    unit whose start job is still queued, where "fail" is refused. A unit with a ``keeper``
    (keepers.py) is stopped whatever its state: its stop stops the keeper."""
    if forget_call(active_state) == "stop" or keeper is not None:
        try:
            bridge.stop_unit(unit, mode=mode)
        except UnitError as exc:
            log.debug(f"stop_unit {unit}: {exc}")
    quietly(log, bridge.reset_failed_unit, unit)


def ensure_connected(bridge, log):
    """At unload, the connection lost (the reactor is stopped: nothing reconnects now):
    open it again, retrying for ~2 s. True if it had to, False if it was open.

    Raises:
        UnitError: still lost after the retries.
    """
    try:
        bridge.pump()  # a loss not noticed yet shows here
        return False
    except UnitError as exc:
        if exc.errno != errno.ECONNRESET:
            raise
    for attempt in range(1, RECONNECT_TRIES + 1):
        try:
            bridge.reconnect()
            log.info("unload: reconnected to systemd")
            return True
        except UnitError:
            if attempt == RECONNECT_TRIES:
                raise
            time.sleep(reconnect_delay(attempt))


def await_replies(bridge, log, grace=UNLOAD_GRACE):
    """Before the connection closes, wait at most ``grace`` for the answers to the calls
    sent without waiting (a stop at the unload): over the bus, systemd asks the bus daemon
    for the caller's credentials as it acts on a call, and refuses the call of a caller
    already gone."""
    deadline = time.monotonic() + grace
    try:
        while bridge.next_deadline() is not None and time.monotonic() < deadline:
            select.select([bridge.fileno()], [], [], 0.05)
            bridge.pump()
    except UnitError as exc:
        log.debug(f"unload: {exc}")


def stop_again(bridge, log, units, grace=UNLOAD_GRACE):
    """At unload, once more for ``units`` whose stop failed or was not answered in the wait
    (accounting slices and keepers: no later sdexec adopts them, so nothing else stops them):
    StopUnit (mode "replace") and ResetFailedUnit, sent without waiting, answers awaited at
    most ``grace``. What is still not stopped is logged by name; the next sdexec's load stops
    this instance's slices and keepers no unit uses (adopt.py)."""
    left = dict.fromkeys(units)  # unit -> why it is not known stopped
    try:
        ensure_connected(bridge, log)
        for unit in units:

            def stopped(exc, unit=unit):
                if exc is None or exc.errno == errno.ENOENT:
                    left.pop(unit, None)
                else:
                    left[unit] = exc

            bridge.stop_unit(unit, on_reply=stopped, timeout=grace, mode="replace")
            bridge.reset_failed_unit(unit, on_reply=lambda exc: None, timeout=grace)
    except UnitError as exc:
        for unit in left:
            left[unit] = left[unit] or exc
    await_replies(bridge, log, grace)
    bridge.fail_pending(UnitError(errno.ETIMEDOUT, f"not answered within {grace:g}s"))
    for unit, why in left.items():
        log.error(f"{unit}: not stopped at unload ({why}): the next sdexec's load stops it")


def see_units_gone(bridge, log, units, grace=UNLOAD_GRACE, stop_signals=None):
    """Wait until systemd forgot ``units`` (StopUnit already sent); signal laggards.

    Each failed unit gets ResetFailedUnit. A unit still loaded after ``grace`` first gets
    its stop signal on its main process (``stop_signals``: unit name to the exec's
    SDEXEC_STOP_TIMER_SIGNAL; SIGUSR1 for a multi-user job shell, which the IMP turns into
    SIGKILL of every process of the job, RFC 15, as the flux user's manager cannot signal
    them) and another ``grace``; then SIGKILL on all its processes and another ``grace``.
    What still remains is logged.
    """
    stop_signals = stop_signals or {}
    units = _wait_gone(bridge, log, units, grace)
    signalled = [u for u in units if stop_signals.get(u) is not None]
    for unit in signalled:
        signum = stop_signals[unit]
        log.error(f"{unit}: not stopped after {grace:g}s, signal {signum} to its main process")
        quietly(log, bridge.kill_unit, unit, signum, "main")
    if signalled:
        units = _wait_gone(bridge, log, units, grace)
    for unit in units:
        log.error(f"{unit}: not stopped after {grace:g}s, SIGKILL")
        quietly(log, bridge.kill_unit, unit, signal.SIGKILL, "all")
    for unit in _wait_gone(bridge, log, units, grace):
        log.error(f"{unit}: still loaded, giving up")


def _wait_gone(bridge, log, units, grace):
    """Poll until systemd forgot ``units`` or ``grace`` passed; returns those still loaded."""
    deadline = time.monotonic() + grace
    while units and time.monotonic() < deadline:
        loaded = {name: active for name, active, _ in bridge.list_units(units)}
        units = [u for u in units if loaded.get(u, "inactive") != "inactive"]
        for unit in units:
            if forget_call(loaded[unit]) == "reset-failed":
                quietly(log, bridge.reset_failed_unit, unit)
        select.select([bridge.fileno()], [], [], 0.05)
        bridge.pump()
    return units
