"""Keeper slices (systemd/keepers.py): which units get one, and its name."""

import errno

from stubs import StubBridge, StubBus, StubLog, StubSweeper, StubWatchers

from flux_sdexec.systemd.keepers import (
    LOOKS_MAX,
    LOST_LOOKS_MAX,
    Keepers,
    keeper_name,
    keeper_of,
    with_keeper,
)
from flux_sdexec.core.errors import UnitError

NOTIFY = [("ExecStart", "a(sasb)", []), ("Type", "s", "notify")]


def test_a_notify_unit_wants_its_keeper_which_is_part_of_it():
    props, aux, keeper = with_keeper("job-1:sys.service", NOTIFY)
    assert keeper == "job\\x2d1:sys.slice"  # "-" nests slices: escaped as systemd does
    assert props == NOTIFY + [("Wants", "as", [keeper])]
    assert aux == [
        (
            keeper,
            [
                ("PartOf", ("as", ["job-1:sys.service"])),
                ("Description", ("s", "keeps job-1:sys.service")),
            ],
        )
    ]


def test_the_last_type_given_counts_as_for_systemd():
    props = [("Type", "s", "exec"), ("Type", "s", "notify")]
    assert with_keeper("a:sys.service", props)[2] == "a:sys.slice"
    assert with_keeper("a:sys.service", props[::-1])[2] is None


def test_other_types_get_no_keeper():
    for props in ([("Type", "s", "exec")], [("Type", "s", "oneshot")], []):
        assert with_keeper("a:sys.service", props) == (props, [], None)


def test_a_name_too_long_for_systemd_gets_no_keeper():
    unit = "a-" * 100 + ":sys.service"  # 212 characters; each "-" takes 4 in the keeper
    assert keeper_name(unit) is None
    assert with_keeper(unit, NOTIFY) == (NOTIFY, [], None)


def test_an_adopted_unit_names_its_keeper_among_its_wants():
    unit = "job-1:sys.service"
    assert keeper_of(unit, {"Wants": ["job\\x2d1:sys.slice"]}) == "job\\x2d1:sys.slice"
    assert keeper_of(unit, {"Wants": ["other.slice"]}) is None
    assert keeper_of(unit, {}) is None


def keepers_on_stubs():
    bridge, watchers, sweeper, gone = StubBridge(), StubWatchers(), StubSweeper(), []
    k = Keepers(bridge, StubBus(), watchers, sweeper, StubLog(), lambda: 5.0, gone.append)
    return k, bridge, watchers, sweeper, gone


NOT_LOADED = UnitError(errno.ENOENT, "Unit job-1:sys.service not loaded.")


def test_release_stops_the_keeper_and_frees_the_name_once_the_unit_is_unloaded():
    k, bridge, watchers, _, gone = keepers_on_stubs()
    k.release("job-1:sys.service", "job\\x2d1:sys.slice")
    assert [(c.member, c.unit) for c in bridge.sent] == [("StopUnit", "job\\x2d1:sys.slice")]
    bridge.answer("StopUnit")
    bridge.answer("GetUnit")  # still loaded: looked at again after a pause
    assert k.stopping("job-1:sys.service") and gone == []
    watchers.armed()[0].fire()
    bridge.answer("GetUnit", NOT_LOADED)
    assert not k.stopping("job-1:sys.service") and gone == ["job-1:sys.service"]
    assert watchers.armed() == []


def test_a_unit_handed_over_keeps_its_keeper():
    k, bridge, _, _, gone = keepers_on_stubs()
    k.hand_over({"job-1:sys.service"})
    k.release("job-1:sys.service", "job\\x2d1:sys.slice")
    assert bridge.sent == [] and gone == []


def test_a_keeper_whose_stop_is_lost_keeps_the_name_until_the_unit_is_seen_unloaded():
    """Review 2026-12b finding 2: a StopUnit lost with the connection freed the name at
    once, while systemd still had the unit (its keeper not stopped yet): a start waiting
    for the name, sent at the reconnect, found the old unit loaded and took it for its
    own (the old process's pid and exit status). The sweeper stops the keeper; the name
    stays taken until systemd says the unit is not loaded, looks lost meanwhile retried."""
    k, bridge, watchers, sweeper, gone = keepers_on_stubs()
    unit = "job-1:sys.service"
    k.release(unit, "job\\x2d1:sys.slice")
    bridge.lose()
    assert sweeper.swept == ["job\\x2d1:sys.slice"] and gone == [] and k.stopping(unit)
    bridge.lose()  # its look: lost too (systemd not back yet)
    assert gone == [] and k.stopping(unit)
    watchers.armed()[0].fire()
    bridge.answer("GetUnit")  # back, and still loaded: the sweeper has not stopped it yet
    watchers.armed()[0].fire()
    bridge.answer("GetUnit", NOT_LOADED)
    assert gone == [unit] and not k.stopping(unit) and watchers.armed() == []


def test_a_keeper_refused_as_sent_looks_again_after_a_pause():
    """The stop refused at once (no connection): the looks follow on a timer, not in a
    loop of refusals."""
    k, bridge, watchers, sweeper, gone = keepers_on_stubs()
    bridge.refuse_next(UnitError(errno.ECONNRESET, "lost connection to systemd"))
    k.release("job-1:sys.service", "job\\x2d1:sys.slice")
    assert sweeper.swept == ["job\\x2d1:sys.slice"] and gone == []
    bridge.lose()  # the look sent after it
    bridge.refuse_next(UnitError(errno.ECONNRESET, "lost connection to systemd"))
    watchers.armed()[0].fire()
    assert gone == [] and len(watchers.armed()) == 1 and bridge.pending == []
    watchers.armed()[0].fire()
    bridge.answer("GetUnit", NOT_LOADED)
    assert gone == ["job-1:sys.service"]


def test_looks_lost_for_too_long_free_the_name_with_an_error():
    k, bridge, watchers, _, gone = keepers_on_stubs()
    k.release("job-1:sys.service", "job\\x2d1:sys.slice")
    bridge.answer("StopUnit")
    for _ in range(LOST_LOOKS_MAX):
        bridge.lose()
        watchers.armed()[0].fire()
    assert gone == []
    bridge.lose()
    assert gone == ["job-1:sys.service"] and watchers.armed() == []


def test_a_unit_whose_hold_was_lost_is_looked_up_until_unloaded():
    """A hold dropped with its connection (holds.py): no keeper to stop, but the name is
    free only once systemd has unloaded the unit."""
    k, bridge, watchers, _, gone = keepers_on_stubs()
    k.await_unload("job-1:sys.service")
    assert [(c.member, c.unit) for c in bridge.sent] == [("GetUnit", "job-1:sys.service")]
    assert k.stopping("job-1:sys.service")
    bridge.answer("GetUnit", NOT_LOADED)
    assert gone == ["job-1:sys.service"]


def test_a_unit_that_runs_on_frees_its_name_after_the_looks():
    k, bridge, watchers, sweeper, gone = keepers_on_stubs()
    k.release("job-1:sys.service", "job\\x2d1:sys.slice")
    bridge.answer("StopUnit")
    for _ in range(LOOKS_MAX):
        bridge.answer("GetUnit")
        watchers.armed()[0].fire()
    bridge.answer("GetUnit")
    assert gone == ["job-1:sys.service"] and sweeper.swept == [] and watchers.armed() == []
