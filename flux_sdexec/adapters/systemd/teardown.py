"""Making systemd forget units when nobody will be watching them any more.

Used at unload, after the reactor has stopped, and for leftovers that cannot be
adopted. StopUnit only starts a stop, and a unit that ends failed stays loaded
until ResetFailedUnit; so this polls the bus itself, within a bounded grace.
"""

import select
import signal
import time

from flux_sdexec.errors import UnitError
from flux_sdexec.unitstate import forget_call

UNLOAD_GRACE = 2.0  # seconds a unit may take to stop before it is SIGKILLed


def quietly(log, call, *args):
    """Make a systemd call whose failure only matters for debugging."""
    try:
        call(*args)
    except UnitError as exc:
        log.debug(f"{call.__name__} {args[0]}: {exc}")


def let_go(bridge, log, unit, active_state):
    """The calls of the forget policy (unitstate.forget_call) for a unit nobody will watch:
    a stopped unit may end failed, so the reset follows the stop."""
    if forget_call(active_state) == "stop":
        quietly(log, bridge.stop_unit, unit)
    quietly(log, bridge.reset_failed_unit, unit)


def see_units_gone(bridge, log, units, grace=UNLOAD_GRACE):
    """Wait until systemd forgot ``units`` (StopUnit already sent); SIGKILL laggards.

    Each failed unit gets ResetFailedUnit; units still loaded after ``grace`` get
    SIGKILL on all their processes and another ``grace``; what still remains is logged.
    """
    for last_resort in (False, True):
        deadline = time.monotonic() + grace
        while units and time.monotonic() < deadline:
            loaded = {name: active for name, active, _ in bridge.list_units(units)}
            units = [u for u in units if loaded.get(u, "inactive") != "inactive"]
            for unit in units:
                if forget_call(loaded[unit]) == "reset-failed":
                    quietly(log, bridge.reset_failed_unit, unit)
            select.select([bridge.fileno()], [], [], 0.05)
            bridge.pump()
        if units and not last_resort:
            for unit in units:
                log.error(f"{unit}: not stopped after {grace:g}s, SIGKILL")
                quietly(log, bridge.kill_unit, unit, signal.SIGKILL, "all")
    for unit in units:
        log.error(f"{unit}: still loaded, giving up")
