"""Accounting slices and keepers must not outlive sdexec (review 2026-12b finding 6).

At unload, the stops of slices and keepers go out without waiting and the unload waits a
bounded time for their answers; one answered with an error, or not answered in that time,
left the slice or keeper running for good (the sweeper, closed, only noted its name; the
bridge's close dropped the calls unanswered), and ``app-sdexec-*.slice`` is no unit glob a
later sdexec adopts. Now such a stop is sent again, within a bound, and the next sdexec's
load stops the slices and keepers of its instance and rank that no adopted unit uses.

The real service (rooted.py) on a fake bridge, after the reactor stopped (teardown's clock
is the test's, so the unload's bounded waits take no time).
"""

import errno
import fnmatch
import types

import fluxpath
from helpers import new
from rooted import RootBridge, service
from stubs import StubLog

fluxpath.add()

from flux_sdexec.core import handoff  # noqa: E402
from flux_sdexec.broker import adopt  # noqa: E402
from flux_sdexec.usage.accounting import Accounting  # noqa: E402
from flux_sdexec.systemd import teardown  # noqa: E402
from flux_sdexec.systemd.keepers import Keepers, keeper_name  # noqa: E402
from flux_sdexec.systemd.sweeper import Sweeper  # noqa: E402
from flux_sdexec.config import Settings  # noqa: E402
from flux_sdexec.usage.cgroup_usage import accounting_slice  # noqa: E402
from flux_sdexec.core.errors import UnitError  # noqa: E402
from flux_sdexec.core.naming import UnitNamer  # noqa: E402
from flux_sdexec.core.registry import Registry  # noqa: E402
from flux_sdexec.core.events import UnitChanged  # noqa: E402
from flux_sdexec.core.states import ProcState  # noqa: E402

UNIT = "imp-shell-0-fA1:tb.service"
SLICE = accounting_slice(UNIT, "0a1b2c3d")
KEEPER = keeper_name(UNIT)
NEVER = object()  # a call systemd never answers
REFUSED = UnitError(errno.EIO, "Input/output error")


class Late:
    """An answer that comes in the unload's wait for the last answers, after the sweeper
    closed (not at the first pump, ensure_connected's)."""

    def __init__(self, answer):
        self.answer = answer


class UnloadBridge(RootBridge):
    """The bridge as the unload uses it. Each call sent without waiting takes the next of
    ``answers[(member, unit)]`` (none left: answered None), given back by a later pump(),
    or never (NEVER). Blocking calls succeed. ``sent`` is every call, in order."""

    def __init__(self, answers=None):
        super().__init__()
        self.answers = answers or {}

    def _call(self, member, unit, on_reply=None, timeout=None, **kwargs):
        self.sent.append((member, unit))
        if on_reply is not None:
            queue = self.answers.get((member, unit), [])
            self.pending.append((on_reply, queue.pop(0) if queue else None))

    def stop_unit(self, unit, **kw):
        self._call("StopUnit", unit, **kw)

    def reset_failed_unit(self, unit, **kw):
        self._call("ResetFailedUnit", unit, **kw)

    def get_unit(self, unit, **kw):
        self._call("GetUnit", unit, **kw)

    def pump(self):
        ready = [c for c in self.pending if c[1] is not NEVER and not isinstance(c[1], Late)]
        self.pending = [
            (on_reply, answer.answer if isinstance(answer, Late) else answer)
            for on_reply, answer in self.pending
            if answer is NEVER or isinstance(answer, Late)
        ]
        for on_reply, answer in ready:
            on_reply(answer)


class Clock:
    """teardown's time: each look at the clock is 0.1 s later, sleeps are instant."""

    def __init__(self):
        self.now = 0.0

    def monotonic(self):
        self.now += 0.1
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def unload_with_stops_in_flight(monkeypatch, answers):
    """The unload of a service whose last record just went: its accounting slice's and its
    keeper's StopUnit sent (as Accounting and Keepers send them), answered per ``answers``."""
    monkeypatch.setattr(teardown, "time", Clock())
    bridge = UnloadBridge(answers)
    svc = service(bridge)
    svc.accounting.stop_slice(SLICE)
    svc.keepers.release(UNIT, KEEPER)
    svc.unload(handoff.RUN_STATE)
    return bridge, svc.log


def stops(bridge, unit):
    return [c for c in bridge.sent if c == ("StopUnit", unit)]


def test_a_slice_and_keeper_stopped_with_an_error_are_stopped_again(monkeypatch):
    """Answered with an error once the sweeper had closed: it only noted the names."""
    bridge, log = unload_with_stops_in_flight(
        monkeypatch, {("StopUnit", SLICE): [Late(REFUSED)], ("StopUnit", KEEPER): [Late(REFUSED)]}
    )
    assert stops(bridge, SLICE) == [("StopUnit", SLICE)] * 2
    assert stops(bridge, KEEPER) == [("StopUnit", KEEPER)] * 2
    assert not [line for line in log.at("error") if "not stopped" in line]


def test_the_unload_closes_the_sweeper_once(monkeypatch):
    """The sweeper is closed once; what reaches it after is taken for the last stop."""
    closed = []
    close = Sweeper.close
    monkeypatch.setattr(Sweeper, "close", lambda self: closed.append(self) or close(self))
    bridge, _ = unload_with_stops_in_flight(monkeypatch, {("StopUnit", SLICE): [Late(REFUSED)]})
    assert len(closed) == 1 and stops(bridge, SLICE) == [("StopUnit", SLICE)] * 2


def test_a_slice_and_keeper_whose_stop_is_not_answered_are_stopped_again(monkeypatch):
    """Not answered in the unload's wait: the bridge's close dropped the calls."""
    bridge, log = unload_with_stops_in_flight(
        monkeypatch, {("StopUnit", SLICE): [NEVER], ("StopUnit", KEEPER): [NEVER]}
    )
    assert stops(bridge, SLICE) == [("StopUnit", SLICE)] * 2
    assert stops(bridge, KEEPER) == [("StopUnit", KEEPER)] * 2
    assert not [line for line in log.at("error") if "not stopped" in line]


def test_what_is_not_stopped_the_second_time_is_logged_by_name(monkeypatch):
    """Bounded: one more stop each, then the names are logged (the next load stops them)."""
    bridge, log = unload_with_stops_in_flight(
        monkeypatch,
        {("StopUnit", SLICE): [NEVER, NEVER], ("StopUnit", KEEPER): [Late(REFUSED)] * 2},
    )
    assert stops(bridge, SLICE) == [("StopUnit", SLICE)] * 2
    assert stops(bridge, KEEPER) == [("StopUnit", KEEPER)] * 2
    errors = log.at("error")
    assert [line for line in errors if line.startswith(f"{SLICE}: not stopped")]
    assert [line for line in errors if line.startswith(f"{KEEPER}: not stopped")]


def test_slices_and_keepers_stopped_at_once_are_not_stopped_again(monkeypatch):
    """An answer before the sweeper closed goes to it, and the unload stops what it has."""
    bridge, _ = unload_with_stops_in_flight(monkeypatch, {})
    assert stops(bridge, SLICE) == [("StopUnit", SLICE)]
    assert stops(bridge, KEEPER) == [("StopUnit", KEEPER)]


def test_the_slice_of_a_unit_on_its_way_out_at_unload_is_stopped(monkeypatch):
    """t0017's ``flux sdexec upgrade --force`` (a bulk-exec job on rank 1), 2 runs in 4: job-exec's
    removal had the job shell's unit stopping (deactivating) when sdexec unloaded. Unloading
    sends such a unit nothing (it is on its way), so no input made it going and its slice
    stayed for good: bulk-exec names units verbatim, so no later load claims the slice."""
    monkeypatch.setattr(teardown, "time", Clock())
    bridge = UnloadBridge()
    svc = service(bridge)
    unit = "shell-1-fA1.service"
    own = accounting_slice(unit, "0a1b2c3d")
    p = new(unit=unit, adopted=True)
    p.unit.left_inactive, p.unit.active_state = True, "deactivating"  # it ran, now stopping
    svc.registry.add(p)
    svc.accounting.adopted(p, {"Slice": own})
    svc.unload(handoff.RUN_STATE)
    assert stops(bridge, own) == [("StopUnit", own)]


def test_the_slice_of_a_kept_unit_on_its_way_out_at_unload_is_not_stopped(monkeypatch):
    """An IMP's unit between STOPPING=1 and its exit (deactivating, its process running)
    at a ``flux sdexec upgrade``: handed over to the next sdexec, so its slice stays with
    it. A stop of the slice would reach the kept unit, and the next sdexec would read the
    job's usage from a removed slice (review 3 #7)."""
    monkeypatch.setattr(teardown, "time", Clock())
    bridge = UnloadBridge()
    svc = service(bridge)
    unit = UnitNamer("tb", 0, False).name("imp-shell-0-fA1")  # the service's namer's
    own = accounting_slice(unit, "0a1b2c3d")
    p = new(
        ["sh"], label="imp-shell-0-fA1", background=True, waitable=True, adopted=True, unit=unit
    )
    svc.registry.add(p)
    svc.accounting.adopted(p, {"Slice": own})
    running = {"ActiveState": "active", "SubState": "running", "ExecMainPID": 9}
    svc.feed(p, UnitChanged(running))
    svc.feed(p, UnitChanged({"ActiveState": "deactivating", "SubState": "stop-sigterm"}))
    assert p.state is ProcState.RUNNING and p.unit.stopping
    plan = handoff.plan_unload(svc.registry, handoff.KEEP_WAITABLE, handoff.RUN_STATE)
    assert plan.hand_over == {unit}
    svc.unload(handoff.RUN_STATE)
    assert stops(bridge, own) == []


# ---- the next sdexec's load ----


class LoadBridge:
    """What systemd has loaded at the next load: ``slices`` only, no unit of the glob."""

    def __init__(self, slices):
        self.slices = slices

    def list_units(self, patterns):
        """As ListUnitsByPatterns: each unit matching any of the globs, once."""
        loaded = [s for s in self.slices if any(fnmatch.fnmatchcase(s, p) for p in patterns)]
        return [(s, "active", "active") for s in loaded]


def test_the_next_load_stops_its_leftover_slices_and_keepers_only(monkeypatch):
    """Ours (this instance and rank), used by no adopted unit: stopped through the sweeper.
    An adopted unit's, another rank's, another instance's, and anything else: left alone."""
    namer = UnitNamer("tb", 0, rank_suffix=True)
    ours = namer.name("imp-shell-0-fA1")
    other_rank = UnitNamer("tb", 1, rank_suffix=True).name("imp-shell-0-fA1")
    other_instance = UnitNamer("tc", 0, rank_suffix=True).name("imp-shell-0-fA1")
    left = [accounting_slice(ours, "0a1b2c3d"), keeper_name(ours)]
    others = [accounting_slice(u, "0a1b2c3d") for u in (other_rank, other_instance)]
    others += [keeper_name(other_rank), keeper_name(other_instance)]
    others += ["app-sdexec.slice", "app.slice", "user-1000.slice", "x:tb.slice"]
    adopted = new(unit=namer.name("imp-shell-1-fB2"), adopted=True)  # found at load
    adopted_slice = accounting_slice(adopted.unit.name, "4e5f6a7b")
    others += [adopted_slice, keeper_name(adopted.unit.name)]
    bridge = LoadBridge(left + others)
    registry = Registry()
    registry.add(adopted)
    jobs = types.SimpleNamespace(shell_started=lambda plain: None)  # the gathering's prefetch
    accounting = Accounting(
        StubLog(), 0, "node0", Settings(), registry, bridge, None, jobs, proc="", kmsg=""
    )
    accounting.adopted(adopted, {"Slice": adopted_slice})
    keepers = Keepers(None, None, None, None, StubLog(), lambda: 5.0, print)
    keepers.record(adopted.unit.name, keeper_name(adopted.unit.name))
    in_use = accounting.slices(registry) | keepers.known()  # as adopt_leftovers asks
    assert sorted(adopt.leftover_slices(bridge, namer, in_use)) == sorted(left)


def test_the_bridge_s_close_answers_the_calls_it_drops():
    """bridge.py's close() dropped the calls still pending unanswered: their senders never
    learnt (a keeper's or slice's stop then went to no sweeper at all)."""
    from flux_sdexec.systemd.bridge import SystemdBridge

    bridge = SystemdBridge(lambda unit, props: None, ())
    answers = []
    bridge._pending[1] = (0.0, answers.append, None)  # a StopUnit sent, not answered yet
    bridge.close()
    assert [exc.errno for exc in answers] == [errno.ECONNRESET]
