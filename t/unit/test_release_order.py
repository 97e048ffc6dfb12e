"""The order in which a record that goes lets its unit's name go (review 2026-12b finding
4): a start waiting for the name (after_release.py) goes out only once both the unit's hold
(holds.py) and its keeper (keepers.py) are released. Stub bridge and timers; the holds'
connection is holds.py's fake sd-bus of test_holds.py."""

import errno

import fluxpath
from stubs import StubBridge, StubBus, StubLog, StubSweeper, StubWatchers

fluxpath.add()

from flux_sdexec.broker.after_release import Releases, StartsAfterRelease  # noqa: E402
from flux_sdexec.systemd.holds import Holds  # noqa: E402
from flux_sdexec.systemd.keepers import Keepers  # noqa: E402
from flux_sdexec.core.errors import UnitError  # noqa: E402

UNIT, KEEPER = "imp-shell-0-fA1-3:tb.service", "imp\\x2dshell\\x2d0\\x2dfA1\\x2d3:tb.slice"
NOT_LOADED = UnitError(errno.ENOENT, f"Unit {UNIT} not loaded.")


def keepers_on(bridge, on_gone):
    """Keepers on ``bridge`` and stubs, telling ``on_gone`` of each keeper gone."""
    return Keepers(
        bridge, StubBus(), StubWatchers(), StubSweeper(), StubLog(), lambda: 5.0, on_gone
    )


def test_a_start_waiting_for_the_name_goes_after_the_keeper_s_stop():
    """t_keeper_order.py of the review, as a test: feed()'s DONE branch released the hold
    first; a unit never held was released at once, and the start waiting for its name
    checked holds and keepers before keepers.release had begun: StartTransientUnit went
    out before the keeper's StopUnit (EEXIST, or that StopUnit stopped the new keeper)."""
    seen = []
    bridge = StubBridge()
    ar = StartsAfterRelease(lambda msg, verb, f: f(msg), lambda *a: None, lambda m: "client")
    holds = Holds(StubLog(), StubWatchers(), on_released=lambda unit, lost: ar.released(unit))
    keepers = keepers_on(bridge, ar.released)

    def start(msg):  # what Requests._start checks before it sends StartTransientUnit
        released = not (holds.releasing(UNIT) or keepers.stopping(UNIT))
        seen.append(("start checked", released))
        if released:
            bridge.start_transient_unit(UNIT, [], on_reply=lambda e: None, timeout=5)

    ar.wait(UNIT, "msg", "imp-shell-0-fA1", start)  # a new exec waits for the old unit's name
    holds.release(UNIT)  # a foreground IMP unit (never held) with a keeper, as feed() did
    keepers.release(UNIT, KEEPER)
    assert seen == []
    assert [(c.member, c.unit) for c in bridge.sent] == [("StopUnit", KEEPER)]
    bridge.answer("StopUnit")
    bridge.answer("GetUnit", NOT_LOADED)  # systemd has unloaded the old unit
    assert seen == [("start checked", True)]
    assert bridge.members() == ["StopUnit", "GetUnit", "StartTransientUnit"]


class Started:
    """A start waiting for UNIT's name: what Requests._start checks, and the call it sends."""

    def __init__(self, releases, bridge):
        self.releases, self.bridge, self.seen = releases, bridge, []

    def __call__(self, msg):
        released = not self.releases.pending(UNIT)
        self.seen.append(("start checked", released))
        if released:
            self.bridge.start_transient_unit(UNIT, [], on_reply=lambda e: None, timeout=5)


def wired(monkeypatch):
    """Holds (on test_holds.py's fake sd-bus), keepers and the waiting start, wired to one
    Releases as the service wires them; UNIT held, its Ref answered."""
    from test_holds import on_fake_bus

    bridge = StubBridge()
    ar = StartsAfterRelease(lambda msg, verb, f: f(msg), lambda *a: None, lambda m: "client")
    releases = Releases(ar.released)
    holds, world, watchers, _ = on_fake_bus(monkeypatch, on_released=releases.hold_released)
    keepers = keepers_on(bridge, releases.keeper_released)
    releases.holds, releases.keepers = holds, keepers
    holds.hold(UNIT)
    start = Started(releases, bridge)
    ar.wait(UNIT, "msg", "imp-shell-0-fA1", start)
    return releases, holds, world, watchers, bridge, start


def answer_unref(world, watchers):
    """systemd answers the Unref, then the GetUnit after it: the hold is released."""
    world.buses[0].answering = True
    world.buses[0].answer()
    watchers.fds[0].fire()


def test_a_held_unit_s_name_is_free_once_its_keeper_too_is_released(monkeypatch):
    """The hold released first: the start waits for the keeper."""
    releases, holds, world, watchers, bridge, start = wired(monkeypatch)
    world.buses[0].answering = False
    releases.release(UNIT, KEEPER)
    assert world.events[-1] == ("Unref", UNIT, 1) and bridge.members() == ["StopUnit"]
    answer_unref(world, watchers)
    assert not holds.releasing(UNIT) and releases.pending(UNIT) and start.seen == []
    bridge.answer("StopUnit")
    bridge.answer("GetUnit", NOT_LOADED)
    assert start.seen == [("start checked", True)] and not releases.pending(UNIT)
    assert bridge.members() == ["StopUnit", "GetUnit", "StartTransientUnit"]


def test_a_held_unit_s_name_is_free_once_its_hold_too_is_released(monkeypatch):
    """The keeper released first (its unit looked up as unloaded): the start waits for the
    Unref's answer."""
    releases, holds, world, watchers, bridge, start = wired(monkeypatch)
    world.buses[0].answering = False
    releases.release(UNIT, KEEPER)
    bridge.answer("StopUnit")
    bridge.answer("GetUnit", NOT_LOADED)
    assert releases.pending(UNIT) and start.seen == []
    answer_unref(world, watchers)
    assert start.seen == [("start checked", True)] and not releases.pending(UNIT)
    assert bridge.members() == ["StopUnit", "GetUnit", "StartTransientUnit"]


def test_a_keeper_stop_that_fails_at_once_still_waits_for_the_hold(monkeypatch):
    """A StopUnit refused as it is sent (the connection lost): the sweeper has the keeper,
    and the name is free only once the unit is seen unloaded and the hold released too."""
    releases, holds, world, watchers, bridge, start = wired(monkeypatch)
    world.buses[0].answering = False
    bridge.refuse_next(UnitError(errno.ECONNRESET, "lost connection to systemd"))
    releases.release(UNIT, KEEPER)
    assert releases.keepers.sweeper.swept == [KEEPER] and start.seen == []
    answer_unref(world, watchers)
    assert start.seen == []
    bridge.answer("GetUnit", NOT_LOADED)
    assert start.seen == [("start checked", True)]


def test_a_unit_with_nothing_to_release_is_free_at_once():
    """Never held, no keeper (a foreground exec of a plain unit): freed within release()."""
    freed = []
    releases = Releases(freed.append)
    releases.holds = Holds(StubLog(), StubWatchers())
    releases.keepers = object()  # never asked (any use raises): no keeper
    releases.release(UNIT, None)
    assert freed == [UNIT] and not releases.pending(UNIT)


def test_feed_lets_a_done_record_s_unit_go_through_releases_alone():
    """feed()'s DONE branch hands the unit and its keeper to Releases, the one place that
    orders the release (holds and keepers are never asked directly: asked, they raise)."""
    from helpers import new
    from rooted import RootBridge, service

    from flux_sdexec.core.events import Unloading
    from flux_sdexec.core.states import ProcState

    svc = service(RootBridge())
    p = new(unit=UNIT)
    svc.keepers.record(UNIT, KEEPER)
    released = []
    svc.releases.release = lambda *args: released.append(args)

    def asked_directly(*args):
        raise AssertionError("released around Releases")

    svc.holds.release = svc.keepers.release = asked_directly
    svc.registry.add(p)
    svc.feed(p, Unloading())
    assert p.state is ProcState.DONE and released == [(UNIT, KEEPER)]
    assert svc.registry.by_unit(UNIT) is None


def test_a_hold_lost_with_its_connection_frees_the_name_once_the_unit_is_unloaded(monkeypatch):
    """Review 2026-12b finding 2, the hold's half: a unit with no keeper whose Unref was
    in flight when the bus went; the start waits until systemd says the unit is gone."""
    releases, holds, world, watchers, bridge, start = wired(monkeypatch)
    world.buses[0].answering = False
    releases.release(UNIT, None)
    world.buses[0].lose()
    watchers.fds[0].fire()
    assert start.seen == [] and releases.pending(UNIT)
    assert [(c.member, c.unit) for c in bridge.sent] == [("GetUnit", UNIT)]
    bridge.answer("GetUnit", NOT_LOADED)
    assert start.seen == [("start checked", True)] and not releases.pending(UNIT)
