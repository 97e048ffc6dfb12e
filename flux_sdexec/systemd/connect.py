"""Opening the hot path's connection to the systemd manager, and subscribing on it.

The manager's private socket first, as systemctl does (``$XDG_RUNTIME_DIR/systemd/private``,
or ``/run/systemd/private`` for the system manager), else the bus; the bus first when other
brokers share the manager (bridge.py ``shared``: its daemon then filters signals by unit,
unitsignals.py). Connecting never waits for systemd: a socket connect is queued by the kernel
even while the manager is stopped or reexecuting, and sd-bus authenticates as it processes.
Only Subscribe() is answered by systemd itself: at load ``open_bus`` waits for it (a refusal
moves on to the bus); after a loss it is sent without waiting, so a stalled manager cannot
block the reactor (bridge.py then watches for its reply).
"""

import os

from flux_sdexec.systemd import sdbus

SYSTEMD = b"org.freedesktop.systemd1"
MANAGER_PATH = b"/org/freedesktop/systemd1"
MANAGER = b"org.freedesktop.systemd1.Manager"
SUBSCRIBE_TIMEOUT_USEC = 25_000_000  # sd-bus's default for a blocking call


def private_socket(user_mode):
    """The path of the manager's private socket, or None when there is none to try."""
    if not user_mode:
        path = "/run/systemd/private"
    elif os.environ.get("XDG_RUNTIME_DIR"):
        path = os.path.join(os.environ["XDG_RUNTIME_DIR"], "systemd", "private")
    else:
        return None
    return path if os.path.exists(path) else None


def open_bus(user_mode, wait, signals):
    """(Bus, via, cookie): the first way that works (the bus first if ``signals.shared``),
    ``signals`` (a UnitSignals) attached and Subscribe() sent on it. ``wait``: the reply
    was awaited (cookie None; a refusal tries the next way), else it is the cookie of the
    Subscribe() sent without waiting. Raises the last OSError when no way worked."""
    bus_name = "the user bus" if user_mode else "the system bus"
    private = private_socket(user_mode)
    order = (bus_name, private) if signals.shared else (private, bus_name)
    for via in [v for v in order if v]:
        bus = None
        try:
            if via is bus_name:
                bus = sdbus.Bus(user_mode)
            else:  # refused (another user's manager, a stale socket): the bus next
                bus = sdbus.Bus(address=b"unix:path=" + via.encode())
            signals.attach(bus, via is bus_name)
            subscribe = bus.new_call(SYSTEMD, MANAGER_PATH, MANAGER, b"Subscribe")
            if wait:
                bus.call(subscribe, SUBSCRIBE_TIMEOUT_USEC)
                return bus, via, None
            return bus, via, bus.send(subscribe)
        except OSError as exc:
            signals.detach()
            if bus is not None:
                bus.close()
            error = exc
    raise error
