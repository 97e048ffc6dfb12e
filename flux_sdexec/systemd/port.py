"""The systemd parts that travel together, handed to each part that orders systemd as one."""

import dataclasses


@dataclasses.dataclass(frozen=True)
class SystemdPort:
    """The way to systemd of one sdexec (the service builds each part).

    Attributes:
        bridge: the ``SystemdBridge``: calls out, signals in.
        bus: its ``BusWatcher``: the pump, and the deadline timer of the calls in flight.
        calls: the ``Calls`` of starts and kills, within their budget.
        sweeper: the ``Sweeper`` of units no exec will reap.
        keepers: the ``Keepers`` that keep a notify unit's end through a bus loss.
    """

    bridge: object
    bus: object
    calls: object
    sweeper: object
    keepers: object
