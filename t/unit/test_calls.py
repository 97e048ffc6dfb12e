"""systemd/calls.py on a stubbed bus: each call answered exactly once."""

import errno
import signal

import pytest

from flux_sdexec.systemd.calls import Calls
from flux_sdexec.core.errors import UnitError

from stubs import StubBridge, StubBus, StubLog, StubWatchers

UNIT = "u:f1.service"
PROPS = [("Description", "s", "a job")]


class Caller:
    """A caller's callbacks: every on_done and on_late it was given."""

    def __init__(self):
        self.answers = []
        self.late = []

    def on_done(self, error):
        self.answers.append(None if error is None else (error.errno, error.strerror))

    def on_late(self, budget, waited):
        self.late.append(budget)


@pytest.fixture
def sd():
    bridge, watchers, log = StubBridge(), StubWatchers(), StubLog()
    calls = Calls(bridge, StubBus(), watchers, log, budget=300.0)
    return bridge, watchers, log, calls


def start(calls, props=PROPS):
    caller = Caller()
    calls.start(UNIT, props, caller.on_done, caller.on_late)
    return caller


def test_a_start_taken_is_answered_once_and_its_budget_runs_until_started(sd):
    bridge, watchers, _, calls = sd
    caller = start(calls)
    bridge.answer("StartTransientUnit")
    assert caller.answers == [None]
    assert len(watchers.armed()) == 1  # a start job systemd keeps queued is still timed
    calls.started(UNIT)
    assert watchers.armed() == [] and calls.live == set()
    assert caller.answers == [None] and caller.late == []


def test_a_start_taken_whose_process_never_runs_is_late_once_the_budget_runs_out(sd):
    bridge, watchers, _, calls = sd
    caller = start(calls)
    bridge.answer("StartTransientUnit")
    watchers.armed()[0].fire()
    assert caller.answers == [None] and caller.late == [300.0]
    assert watchers.armed() == []


def test_a_start_systemd_refuses_is_answered_with_its_error(sd):
    bridge, watchers, _, calls = sd
    caller = start(calls)
    bridge.answer("StartTransientUnit", UnitError(errno.EINVAL, "Invalid Type setting: x"))
    assert caller.answers == [(errno.EINVAL, "Invalid Type setting: x")]
    assert watchers.armed() == [] and calls.live == set()


def test_a_start_that_cannot_be_encoded_is_answered_einval_once(sd):
    """Issue 22 finding 6: a lone surrogate from a Python client makes str.encode raise
    while sending; the budget must not answer the exec a second time 300 s later."""
    bridge, watchers, log, calls = sd
    bridge.refuse_next(UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed"))
    caller = start(calls, [("Description", "s", "\ud800")])
    assert len(caller.answers) == 1
    errnum, text = caller.answers[0]
    assert errnum == errno.EINVAL and text.startswith("StartTransientUnit: 'utf-8' codec")
    assert watchers.armed() == [] and calls.live == set() and bridge.sent == []
    calls.started(UNIT)  # the exec handler's cleanup finds nothing left to do
    assert not calls.start_unsettled(UNIT)
    assert caller.answers == [(errnum, text)] and caller.late == []
    assert log.at("error") == []  # the client's value, not a bug of ours


def test_a_send_that_raises_for_a_bug_is_logged_and_answered_einval_once(sd):
    bridge, watchers, log, calls = sd
    bridge.refuse_next(TypeError("an integer is required"))
    caller = start(calls)
    assert caller.answers == [(errno.EINVAL, "StartTransientUnit: an integer is required")]
    assert watchers.armed() == [] and calls.live == set()
    assert log.at("error") == [f"{UNIT}: StartTransientUnit: TypeError('an integer is required')"]


def test_a_start_lost_with_the_connection_is_sent_again_when_systemd_lacks_the_unit(sd):
    bridge, _, _, calls = sd
    caller = start(calls)
    bridge.lose()
    assert calls.start_unsettled(UNIT) and caller.answers == []
    calls.reconnected()
    assert calls.start_unsettled(UNIT)  # still unsettled while its lookup runs
    bridge.answer("GetUnit", UnitError(errno.ENOENT, "Unit u:f1.service not loaded."))
    bridge.answer("StartTransientUnit")
    assert bridge.members() == ["StartTransientUnit", "GetUnit", "StartTransientUnit"]
    assert caller.answers == [None]


def test_a_start_not_answered_in_time_is_taken_when_the_unit_is_loaded(sd):
    bridge, _, log, calls = sd
    caller = start(calls)
    bridge.answer("StartTransientUnit", UnitError(errno.ETIMEDOUT, "systemd did not answer"))
    bridge.answer("GetUnit")
    assert bridge.members() == ["StartTransientUnit", "GetUnit"]
    assert caller.answers == [None]
    assert log.at("warning") == [
        f"{UNIT}: no reply to StartTransientUnit within 25s, looking " "the unit up"
    ]


def test_a_start_out_of_budget_is_answered_once_and_a_late_reply_is_ignored(sd):
    bridge, watchers, _, calls = sd
    caller = start(calls)
    watchers.armed()[0].fire()
    bridge.answer("StartTransientUnit")
    assert len(caller.answers) == 1 and caller.answers[0][0] == errno.ETIMEDOUT
    assert watchers.armed() == [] and calls.live == set()


def test_a_kill_lost_with_the_connection_is_sent_again_while_the_unit_is_loaded(sd):
    bridge, _, _, calls = sd
    caller = Caller()
    calls.kill(UNIT, signal.SIGKILL, caller.on_done)
    bridge.lose()
    calls.reconnected()
    bridge.answer("GetUnit")
    bridge.answer("KillUnit")
    assert [(c.member, c.args) for c in bridge.sent] == [
        ("KillUnit", (signal.SIGKILL,)),
        ("GetUnit", ()),
        ("KillUnit", (signal.SIGKILL,)),
    ]
    assert caller.answers == [None] and calls.live == set()


def test_a_kill_of_a_unit_gone_meanwhile_is_esrch(sd):
    bridge, _, _, calls = sd
    caller = Caller()
    calls.kill(UNIT, signal.SIGTERM, caller.on_done)
    bridge.lose()
    calls.reconnected()
    bridge.answer("GetUnit", UnitError(errno.ENOENT, "not loaded"))
    assert caller.answers == [(errno.ESRCH, "unit is gone")]
    assert bridge.members() == ["KillUnit", "GetUnit"]


def test_close_answers_every_call_not_settled_and_stops_every_timer(sd):
    bridge, watchers, _, calls = sd
    taken, lost, killer = start(calls), Caller(), Caller()
    calls.start("v:f1.service", PROPS, lost.on_done, lost.on_late)
    bridge.answer("StartTransientUnit")  # the first start's
    calls.kill(UNIT, signal.SIGTERM, killer.on_done)
    bridge.lose()
    calls.close(errno.ENOSYS, "sdexec module is unloading")
    assert taken.answers == [None] and taken.late == []
    assert lost.answers == [(errno.ENOSYS, "sdexec module is unloading")]
    assert killer.answers == [(errno.ENOSYS, "sdexec module is unloading")]
    assert watchers.armed() == [] and calls.live == set() and calls.waiting == set()
    calls.reconnected()
    assert bridge.pending == []


def test_a_start_refused_while_sending_leaves_no_record_behind(sd):
    """sd-bus refuses a value (UnitError at once): the exec is answered from inside start(),
    and started() has run before start() returns; the start must not be recorded after it."""
    bridge, watchers, _, calls = sd
    bridge.refuse_next(UnitError(errno.EINVAL, "Invalid argument"))
    caller = Caller()
    calls.start(UNIT, PROPS, lambda e: (caller.on_done(e), calls.started(UNIT)), caller.on_late)
    assert caller.answers == [(errno.EINVAL, "Invalid argument")]
    assert calls._starts == {} and calls.live == set() and watchers.armed() == []
