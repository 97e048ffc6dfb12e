"""A label is free again once a wait has given the process's status (as in flux-core's
C module): the record kept for the answer grace, or revived after its client left, goes
at once for a new exec, which waits for the old unit to go (its name is the label's)."""

import errno
import syslog

from flux_sdexec.broker.after_release import StartsAfterRelease
from flux_sdexec.broker.parked import DISCONNECT_TEXT
from flux_sdexec.core.events import AnswerMaybeLost, LabelReused, Log, ResetFailedUnit, UnitChanged
from flux_sdexec.core.machine import handle
from flux_sdexec.core.registry import Registry
from flux_sdexec.core.states import ProcState

from helpers import new, replay, until_failed
from test_answer_grace import collected, running

S = ProcState
LET_GO = "shell-0-f1[{}]: label taken by a new exec, let go"


def test_in_the_answer_grace_the_record_goes_for_a_new_exec():
    """`flux sproc wait L` answered, then at once `flux exec --label L`: no EEXIST."""
    p = running()
    collected(p)
    assert p.label_free
    assert handle(p, LabelReused()) == [
        Log(syslog.LOG_INFO, LET_GO.format(p.pid)),
        ResetFailedUnit(),
    ]
    assert p.state is S.RELEASING and p.wait.answered_to is None


def test_a_revived_record_goes_for_a_new_exec_instead_of_holding_the_label():
    """`flux sproc wait L` exits with its answer: the record is revived for 20 s (the
    upgrade's protection); a new exec of L takes the label and the record goes."""
    p = running()
    registry = Registry()
    registry.add(p)
    collected(p)
    handle(p, AnswerMaybeLost())
    assert registry.find(-1, "shell-0-f1") is p and p.label_free
    assert handle(p, LabelReused()) == [
        Log(syslog.LOG_INFO, LET_GO.format(p.pid)),
        ResetFailedUnit(),
    ]
    assert registry.find(-1, "shell-0-f1") is None
    assert handle(p, UnitChanged({"ActiveState": "inactive", "SubState": "dead"}))
    assert p.state is S.DONE


def test_a_zombie_no_wait_collected_keeps_its_label():
    """Its status was never given (our own exec, or adopted): a new exec is refused."""
    own = running()
    replay(own, "exit-1", until=until_failed("exit-1"), since=6)
    adopted = new(["sh"], label="L", background=True, waitable=True, adopted=True)
    props = {"ActiveState": "failed", "SubState": "failed", "ExecMainPID": 9}
    handle(adopted, UnitChanged({**props, "ExecMainCode": 1, "ExecMainStatus": 3}))
    for p in (own, adopted):
        assert p.state is S.ZOMBIE and not p.label_free
        assert handle(p, LabelReused()) == [] and p.state is S.ZOMBIE


def test_a_running_process_keeps_its_label():
    p = running()
    assert not p.label_free and handle(p, LabelReused()) == [] and p.state is S.RUNNING


class Sent:
    """What StartsAfterRelease's serve and respond_error were asked to do."""

    def __init__(self):
        self.served, self.errors = [], []

    def serve(self, msg, verb, func):
        self.served.append((msg, verb))
        func(msg)

    def respond_error(self, msg, errnum, text):
        self.errors.append((msg, errnum, text))


def waiting():
    sent = Sent()
    return sent, StartsAfterRelease(sent.serve, sent.respond_error, lambda msg: msg["sender"])


def test_the_new_exec_starts_once_the_old_unit_is_gone():
    sent, starts = waiting()
    msg, started = {"sender": "c1"}, []
    starts.wait("L-0:t1.service", msg, "L", started.append)
    assert starts.has(unit="L-0:t1.service") and starts.has(label="L") and len(starts) == 1
    starts.released("other:t1.service")
    assert started == []
    starts.released("L-0:t1.service")
    assert started == [msg] and sent.served == [(msg, "exec")] and len(starts) == 0
    starts.released("L-0:t1.service")  # once only
    assert started == [msg]


def test_a_waiting_exec_ends_with_its_client_or_the_unload_never_started():
    sent, starts = waiting()
    a, b, c = {"sender": "c1"}, {"sender": "c2"}, {"sender": "c2"}
    started = []
    starts.wait("a:t1.service", a, "a", started.append)
    starts.wait("b:t1.service", b, "b", started.append)
    starts.wait("c:t1.service", c, None, started.append)
    starts.cancel("c2")
    assert sent.errors == [
        (b, errno.ECONNRESET, DISCONNECT_TEXT),
        (c, errno.ECONNRESET, DISCONNECT_TEXT),
    ]
    starts.cancel_all(errno.ENOSYS, "sdexec module is unloading")
    assert sent.errors[-1] == (a, errno.ENOSYS, "sdexec module is unloading")
    for unit in ("a:t1.service", "b:t1.service", "c:t1.service"):
        starts.released(unit)
    assert started == [] and len(starts) == 0
