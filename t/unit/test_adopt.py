"""Adoption at load (broker/adopt.py) on a fake bridge: each leftover unit is tracked
whole, or let go with nothing of it left behind. The registry, the keepers and the holds
are the real ones (the holds on test_holds.py's fake bus); the rest records.
"""

import errno

import fluxpath
from stubs import StubLog, StubSweeper
from test_holds import on_fake_bus

fluxpath.add()

from flux_sdexec.broker import adopt  # noqa: E402
from flux_sdexec.core.errors import UnitError  # noqa: E402
from flux_sdexec.core.naming import UnitNamer  # noqa: E402
from flux_sdexec.core.registry import Registry  # noqa: E402
from flux_sdexec.systemd.keepers import Keepers, keeper_name  # noqa: E402
from flux_sdexec.systemd.port import SystemdPort  # noqa: E402

NAMER = UnitNamer("tb", 0, False)
KEPT, UNWATCHABLE = NAMER.name("kept"), NAMER.name("unwatchable")
QUOTA = UnitError(errno.ENOBUFS, "cannot watch the unit: No buffer space available")


class LoadBridge:
    """systemd at load: ``units`` running, each with its keeper; ``refused``'s watch
    raises QUOTA (an AddMatch over the match quota). ``stopped``: the StopUnits, in order."""

    def __init__(self, units, refused):
        self.units, self.refused = units, refused
        self.stopped, self.watched = [], []

    def list_units(self, patterns):
        return [(u, "active", "running") for u in self.units if NAMER.glob in patterns]

    def get_unit_properties(self, unit):
        return {
            "ActiveState": "active",
            "SubState": "running",
            "MainPID": 42,
            "ExecStart": [("/bin/sleep", ["/bin/sleep", "300"])],
            "Wants": [keeper_name(unit)],
        }

    def watch(self, unit):
        if unit in self.refused:
            raise QUOTA
        self.watched.append(unit)

    def stop_unit(self, unit, mode="replace"):
        self.stopped.append(unit)

    def reset_failed_unit(self, unit):
        pass

    def pump(self):
        pass


class Parts:
    """Accounting, catch-up and orphans as adoption calls them: nothing to do."""

    def adopted(self, p, props):
        pass

    def slices(self, registry):
        return set()

    def read(self, p):
        pass

    def consider(self, p):
        pass


def test_a_unit_whose_watch_fails_is_let_go_and_forgotten(monkeypatch):
    """Review 2026-12c finding 12: a step after ``registry.add`` that failed let the unit go
    but left its process tracked (listed for good, never fed: a wait on its label never
    answered), its hold taken and its keeper recorded (so spared at the sweep)."""
    holds, _, _, _ = on_fake_bus(monkeypatch)
    bridge = LoadBridge([KEPT, UNWATCHABLE], refused={UNWATCHABLE})
    registry, parts = Registry(), Parts()
    keepers = Keepers(None, None, None, None, StubLog(), lambda: 5.0, print)
    adopted = adopt.adopt_leftovers(
        log=StubLog(), namer=NAMER, registry=registry, feed=lambda p, event: None,
        systemd=SystemdPort(bridge, bridge, None, StubSweeper(), keepers), catch_up=parts,
        holds=holds, accounting=parts, orphans=parts, guard_unit="guard.service",
    )  # fmt: skip
    assert adopted == 1 and bridge.stopped == [UNWATCHABLE]
    assert [p.unit.name for p in registry] == [KEPT], "the unit let go is still tracked"
    assert holds.held == {KEPT}
    assert keepers.known() == {keeper_name(KEPT)}
