"""Adoption over a bus: a unit that ends between its property read and its match is seen to end.

Brokers that share a manager take their signals through the bus daemon, which forwards a
unit's only once the unit's match is in. Adoption reads a leftover unit's properties, then
watches it; a unit that ended in between sent its signals to nobody. Found by t0017 (one run
in eight): a 2-node job's rank-0 shell exited 10 ms after `flux sdexec upgrade`'s new sdexec
read it as running; sdexec listed it running for good, job-exec's wait was never answered
and the job never ended.

Here the read is made to straddle the exit: the unit's main process is killed right after
adoption reads it, and the read returns once the manager reports the exit (seen by a second
connection that watched the unit all along). The adopting connection must then learn the
exit, within a bound.
"""

import logging
import select
import time
import uuid

from conftest import systemctl

from flux_sdexec.broker import adopt
from flux_sdexec.broker.catchup import CatchUp
from flux_sdexec.core.events import UnitChanged
from flux_sdexec.core.naming import UnitNamer
from flux_sdexec.core.registry import Registry
from flux_sdexec.systemd.port import SystemdPort

BOUND = 5.0  # seconds for the adopting connection to learn the exit
LOG = logging.getLogger("test")  # as test_guard.py: pytest shows its records on a failure


class Parts:
    """What adoption is given besides the bridge and the catch-up: records, no effects."""

    def hold(self, unit, wait=False):
        pass

    def release(self, unit):
        pass

    def record(self, unit, keeper):
        pass

    def forget(self, unit):
        pass

    def adopted(self, p, props):
        pass

    def consider(self, p):
        pass

    def sweep(self, name, why):
        pass

    def slices(self, registry):
        return set()

    def known(self):
        return set()

    def reconnected(self):
        pass

    def start_unsettled(self, unit):
        return False


def ended(props):
    return props.get("ActiveState") in ("failed", "inactive") or props.get("SubState") == "exited"


def test_a_unit_ending_as_it_is_adopted_is_seen_to_end(shared_pair):
    starter, adopter = shared_pair
    namer = UnitNamer(f"t{uuid.uuid4().hex[:8]}", 0, True)
    unit = namer.name("shell-0-fGap")
    starter.start(["/bin/sleep", "300"], unit=starter.new_unit(unit))
    starter.wait_state(unit, "active", "running")
    adopter.units.append(unit)

    read = adopter.bridge.get_unit_properties

    def read_then_end(name):
        props = read(name)
        if name == unit:
            systemctl("kill", "--signal=SIGKILL", unit)
            starter.wait_for(unit, ended)  # the manager has sent the exit's signals
        return props

    adopter.bridge.get_unit_properties = read_then_end
    fed = []
    registry, parts, log = Registry(), Parts(), LOG

    def feed(p, event):
        fed.append(event)

    catch_up = CatchUp(adopter.bridge, registry, parts, feed, lambda p: None, log, lambda: 10.0)
    adopted = adopt.adopt_leftovers(
        log=log, namer=namer, registry=registry, feed=feed,
        systemd=SystemdPort(adopter.bridge, adopter.bridge, None, parts, parts),
        catch_up=catch_up, holds=parts, accounting=parts, orphans=parts,
        guard_unit=f"guard-{namer.instance}.service",
    )  # fmt: skip
    assert adopted == 1
    assert isinstance(fed[0], UnitChanged) and not ended(fed[0].props)  # read while running

    def learned():
        fed_end = any(isinstance(e, UnitChanged) and ended(e.props) for e in fed[1:])
        return fed_end or any(ended(props) for props in adopter.signals[unit])

    deadline = time.monotonic() + BOUND
    while not learned() and time.monotonic() < deadline:
        select.select([adopter.bridge], [], [], deadline - time.monotonic())
        adopter.bridge.pump()
    assert learned(), f"{unit}: its exit never reached the adopting sdexec"
