"""The catch-up after a reconnect (broker/catchup.py), on real SdProcs and the real state
machine, with systemd's answers stubbed: issue 22, finding 1 (a unit systemd stopped and
forgot while the connection was down) and finding 7 (the reads do not block)."""

import errno

from flux_sdexec.broker.catchup import CatchUp
from flux_sdexec.core.errors import UnitError
from flux_sdexec.core.events import AnswerWait, RespondError, StopUnit, UnitChanged, WaitRequested
from flux_sdexec.core.machine import handle
from flux_sdexec.core.registry import Registry
from flux_sdexec.core.states import ProcState

from helpers import new

RUN_AND_EXIT_0 = [
    {"ActiveState": "activating", "SubState": "start", "ExecMainPID": 42},
    {"ActiveState": "active", "SubState": "running"},
    {"ActiveState": "active", "SubState": "exited", "ExecMainCode": 1, "ExecMainStatus": 0},
]
# what GetAll answers for a unit systemd has forgotten (it loads a stub to answer)
FORGOTTEN = {"LoadState": "not-found", "ActiveState": "inactive", "SubState": "dead"}
RUNNING = {"LoadState": "loaded", "ActiveState": "active", "SubState": "running"}


class Bridge:
    """read_unit() sent without waiting: the test answers each read later, as a pump would."""

    def __init__(self, log):
        self.log = log  # the order of the calls sent, shared with Calls
        self.reads = {}  # unit -> on_reply of its last read

    def read_unit(self, unit, on_reply, timeout):
        assert timeout == 5.0
        self.log.append(("GetAll", unit))
        self.reads[unit] = on_reply

    def answer(self, unit, props=None, error=None):
        self.reads.pop(unit)(error, props)


class Calls:
    def __init__(self, log, unsettled=()):
        self.log = log
        self.unsettled = set(unsettled)

    def reconnected(self):
        self.log.append(("lookups",))

    def start_unsettled(self, unit):
        return unit in self.unsettled


class Log:
    def __init__(self):
        self.lines = []

    def __getattr__(self, level):
        return lambda text: self.lines.append((level, text))


class Service:
    """The service's feed(): the machine's actions recorded; a DONE process forgotten."""

    def __init__(self, unsettled=()):
        self.sent = []
        self.registry = Registry()
        self.bridge = Bridge(self.sent)
        self.calls = Calls(self.sent, unsettled)
        self.actions = []
        self.lost = []
        self.log = Log()
        self.catch_up = CatchUp(
            self.bridge,
            self.registry,
            self.calls,
            self.feed,
            self.lost.append,
            self.log,
            lambda: 5.0,
        )

    def feed(self, p, event):
        self.actions += handle(p, event)
        if p.state is ProcState.DONE:
            self.registry.remove(p)

    def track(self, p, *signals):
        self.registry.add(p)
        for props in signals:
            self.feed(p, UnitChanged(props))
        return p


def test_foreground_exec_whose_unit_was_forgotten_ends():
    """Finding 1: a foreground exec ran and exited 0 ("finished" answered, StopUnit sent);
    systemd stopped and forgot the unit, and the "inactive" signal was lost with the
    connection. The catch-up's read answers "not-found": the exec ends with ENODATA instead
    of waiting for a signal that cannot come."""
    svc = Service()
    p = svc.track(new(unit="fg.service"), *RUN_AND_EXIT_0)
    assert p.state is ProcState.FINISHED and StopUnit() in svc.actions
    svc.actions.clear()
    svc.catch_up.catch_up()
    svc.bridge.answer("fg.service", FORGOTTEN)
    assert RespondError(errno.ENODATA) in svc.actions
    assert p.state is ProcState.DONE and svc.registry.by_unit("fg.service") is None


def test_released_record_whose_unit_was_forgotten_frees_its_label():
    """Finding 1: a bgexec record whose wait was answered is released (StopUnit sent);
    the unit was forgotten during the reconnect: the record goes, and its label with it."""
    svc = Service()
    p = new(unit="bg.service", label="L", background=True, waitable=True)
    svc.track(p, *RUN_AND_EXIT_0)
    svc.feed(p, WaitRequested("w"))
    assert AnswerWait("w", 0, ()) in svc.actions and p.state is ProcState.RELEASING
    svc.catch_up.catch_up()
    svc.bridge.answer("bg.service", FORGOTTEN)
    assert p.state is ProcState.DONE and not svc.registry.has_label("L")


def test_not_found_is_ignored_while_the_start_is_unsettled():
    """A start whose reply was lost: systemd may not have the unit yet (its lookup sends the
    start again), so "not-found" says nothing; once the unit is there its state is fed."""
    svc = Service(unsettled={"new.service"})
    p = svc.track(new(unit="new.service"))
    svc.catch_up.catch_up()
    svc.bridge.answer("new.service", FORGOTTEN)
    assert p.state is ProcState.STARTING and not svc.actions
    svc.catch_up.catch_up()
    svc.bridge.answer("new.service", {**RUNNING, "ExecMainPID": 42})
    assert p.state is ProcState.RUNNING and p.unit.pid == 42


def test_a_start_taken_but_forgotten_fails_the_exec():
    """A start systemd took (settled) whose unit is now "not-found" was stopped before it
    ran: the exec fails instead of hanging in STARTING."""
    svc = Service()
    p = svc.track(new(unit="gone.service"))
    svc.catch_up.catch_up()
    svc.bridge.answer("gone.service", FORGOTTEN)
    assert p.state is ProcState.DONE
    assert [a.errnum for a in svc.actions if isinstance(a, RespondError)] == [errno.EINVAL]


def test_a_running_process_whose_unit_is_not_found_is_lost():
    """A unit that was running (no exit known) and is "not-found" after a reconnect: the
    manager restarted without it. It is handed to ``lost`` (its processes signalled, the
    process ended as killed), not fed as an ordinary end with no exit status."""
    svc = Service()
    p = svc.track(new(unit="run.service"), *RUN_AND_EXIT_0[:2])
    assert p.state is ProcState.RUNNING
    svc.catch_up.catch_up()
    svc.bridge.answer("run.service", FORGOTTEN)
    assert svc.lost == [p]


def test_lookups_go_out_before_the_reads():
    """The lost calls' GetUnit go out first: on the same connection they are answered before
    a read loads a "not-found" stub of a unit systemd does not have."""
    svc = Service()
    svc.track(new(unit="a.service"), *RUN_AND_EXIT_0[:2])
    svc.track(new(unit="b.service"), *RUN_AND_EXIT_0[:2])
    svc.catch_up.catch_up()
    assert svc.sent == [("lookups",), ("GetAll", "a.service"), ("GetAll", "b.service")]


def test_a_read_past_its_deadline_is_sent_again_one_lost_waits_for_the_next_reconnect():
    svc = Service()
    p = svc.track(new(unit="slow.service"), *RUN_AND_EXIT_0)
    svc.catch_up.catch_up()
    svc.bridge.answer("slow.service", error=UnitError(errno.ETIMEDOUT, "systemd did not answer"))
    assert svc.sent.count(("GetAll", "slow.service")) == 2
    svc.bridge.answer("slow.service", error=UnitError(errno.ECONNRESET, "lost"))
    assert svc.sent.count(("GetAll", "slow.service")) == 2 and not svc.bridge.reads
    assert p.state is ProcState.FINISHED


def test_an_answer_for_a_process_over_meanwhile_is_dropped():
    """The unit's process ended (and the name was reused) before the read was answered."""
    svc = Service()
    old = svc.track(new(unit="u.service"), *RUN_AND_EXIT_0)
    svc.catch_up.catch_up()
    svc.registry.remove(old)
    fresh = svc.track(new(unit="u.service"))
    svc.bridge.answer("u.service", FORGOTTEN)
    assert fresh.state is ProcState.STARTING and old.state is ProcState.FINISHED
