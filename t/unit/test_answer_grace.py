"""The answer grace: a wait answer lost to a departing client is not a lost job.

After a wait is answered the record is hidden, its unit kept loaded for ANSWER_GRACE;
the answered client disconnecting within it revives the record (collectable by label
and pid for CLAIM_WINDOW, handed over by a clean unload); a grace that ends with the
client connected lets the unit go, as before (a job shell's is kept while its job runs:
test_answer_kept.py).
"""

import errno
import syslog
from dataclasses import dataclass

from flux_sdexec.core import handoff
from flux_sdexec.core.events import (
    AnswerMaybeLost,
    AnswerWait,
    ArmGrace,
    GraceExpired,
    Log,
    Reap,
    ResetFailedUnit,
    StopUnit,
    UnitChanged,
    Unloading,
    WaitRequested,
    ClaimsStart,
)
from flux_sdexec.core.machine import handle
from flux_sdexec.core.registry import Registry
from flux_sdexec.core.states import Claim, ProcState
from flux_sdexec.core.waits import ANSWER_GRACE, FIRST_WAIT_BOUND, CLAIM_WINDOW

from helpers import new, pid_of, replay, until_failed

S = ProcState
LOST = (
    f"shell-0-f1[{pid_of('exit-1')}]: its waiter left within {ANSWER_GRACE:g}s of the answer: "
    f"collectable for {CLAIM_WINDOW:g}s"
)


@dataclass(frozen=True)
class Waiter:
    """What the adapter's wait request looks like to the core and the registry."""

    sender: str


EXEC = Waiter("job-exec-0")  # the exec request, from an earlier job-exec
OUTPUT = ({"stream": "stdout", "rank": "0", "data": "x\n"},)


def running(label="shell-0-f1", unit="shell-0-f1:t1.service"):
    """A job shell that runs and has written one line."""
    p = new(["/bin/false"], label=label, unit=unit, background=True, waitable=True, request=EXEC)
    replay(p, "exit-1", until=6)
    p.wait.retained.add({"stream": "stdout", "rank": "0", "data": "x\n"}, 2)
    assert p.state is S.RUNNING
    return p


def collected(p, sender="job-exec-1"):
    """A wait parked while ``p`` runs is answered when it exits 1: the grace starts."""
    waiter = Waiter(sender)
    assert handle(p, WaitRequested(waiter)) == []
    actions = replay(p, "exit-1", until=until_failed("exit-1"), since=6)
    assert actions[-2:] == [AnswerWait(waiter, 256, OUTPUT), ArmGrace(ANSWER_GRACE)]
    assert StopUnit() not in actions and ResetFailedUnit() not in actions
    assert p.state is S.ANSWERED and p.wait.answered_to is waiter
    return waiter


def recollect(p, sender):
    """A wait on the (revived) zombie: answered at once, and the record let go."""
    waiter = Waiter(sender)
    assert handle(p, WaitRequested(waiter)) == [AnswerWait(waiter, 256, OUTPUT), ResetFailedUnit()]
    assert p.state is S.RELEASING
    return waiter


def test_connected_client_a_second_wait_finds_nothing_and_the_grace_lets_the_unit_go():
    """flux-core's semantics for a connected client: once answered, the process is not
    found (by label or pid); the unit stays loaded only until the grace ends (a job
    shell's is kept while its job runs: test_answer_kept.py)."""
    p = running(label="L", unit="L:t1.service")
    registry = Registry()
    registry.add(p)
    collected(p)
    assert registry.find(-1, "L") is None
    assert registry.find(p.pid, None) is None
    assert handle(p, GraceExpired()) == [ResetFailedUnit()]
    assert p.state is S.RELEASING and p.wait.answered_to is None
    assert handle(p, UnitChanged({"ActiveState": "inactive", "SubState": "dead"})) == [Reap()]


def test_client_gone_within_the_grace_revives_the_record_for_the_next_client():
    """A client removed as its process ended: the next client's wait by label (or pid)
    gets the same status and output; asked of a zombie, that answer lets the unit go (a
    job shell's is kept: test_answer_kept.py)."""
    p = running(label="L", unit="L:t1.service")
    registry = Registry()
    registry.add(p)
    collected(p, "job-exec-1")
    assert registry.by_sender("job-exec-1") == [p]
    lost = LOST.replace("shell-0-f1", "L")
    assert handle(p, AnswerMaybeLost(registry.label_taken(p))) == [
        Log(syslog.LOG_INFO, lost),
        ArmGrace(CLAIM_WINDOW),
    ]
    assert p.state is S.ZOMBIE and p.visible and p.wait.answered_to is None
    assert registry.find(-1, "L") is p
    assert registry.find(p.pid, None) is p
    recollect(p, "job-exec-2")


def test_a_revived_record_nobody_collects_is_let_go_after_the_hold():
    """A waiter that simply exited after its answer leaves the unit for CLAIM_WINDOW."""
    p = running()
    collected(p)
    handle(p, AnswerMaybeLost())
    text = f"shell-0-f1[{p.pid}]: not collected within {CLAIM_WINDOW:g}s, let go"
    assert handle(p, GraceExpired()) == [Log(syslog.LOG_INFO, text), ResetFailedUnit()]
    assert p.state is S.RELEASING and not p.visible


def test_a_label_taken_meanwhile_is_not_revived():
    """A newer process with the same label (allowed once the first was answered) keeps
    it: the old record is let go rather than making two."""
    old = running(unit="shell-0-f1:t1.service")
    newer = running(unit="shell-0-f1-again:t1.service")
    registry = Registry()
    registry.add(old)
    collected(old)
    assert not registry.label_taken(old)
    registry.add(newer)
    assert registry.label_taken(old)
    assert handle(old, AnswerMaybeLost(registry.label_taken(old))) == [
        Log(syslog.LOG_INFO, f"shell-0-f1[{old.pid}]: label reused, not revived"),
        ResetFailedUnit(),
    ]
    assert registry.find(-1, "shell-0-f1") is newer


def test_a_stale_expiry_changes_nothing():
    """An expiry that raced with a collect (or hits a plain zombie) is ignored."""
    p = running()
    replay(p, "exit-1", until=until_failed("exit-1"), since=6)
    assert handle(p, GraceExpired()) == []
    assert p.state is S.ZOMBIE


def test_a_wait_answered_at_once_lets_the_record_go_as_before():
    """A wait that finds the process over was sent a moment ago by a client that is
    there: no grace, the unit is let go, a second wait finds nothing (a job shell's has
    the grace: test_answer_kept.py)."""
    p = running(label="L", unit="L:t1.service")
    registry = Registry()
    registry.add(p)
    replay(p, "exit-1", until=until_failed("exit-1"), since=6)
    recollect(p, "flux-sproc-wait")
    assert p.wait.answered_to is None and registry.find(-1, "L") is None


def test_clean_unload_hands_over_a_revived_record_and_stops_an_answered_one():
    """The revived record is a zombie like any: the next sdexec adopts it. One still in
    its grace was answered to a client that is still there: its unit stops."""
    revived, answered = running(), running(label="b", unit="b:t1.service")
    for p in (revived, answered):
        collected(p)
    handle(revived, AnswerMaybeLost())
    keep = handoff.plan_unload([revived, answered], handoff.KEEP_WAITABLE, "run").hand_over
    assert keep == {"shell-0-f1:t1.service"}
    assert handle(answered, Unloading()) == [ResetFailedUnit(), Reap()]
    assert handle(revived, Unloading(hand_over=True))[-1] == Reap()


def test_the_grace_stops_an_exited_unit_that_did_not_fail():
    """exit 0 leaves the unit active/exited: the grace's end stops it."""
    p = new(["/bin/true"], label="L", background=True, waitable=True, request=EXEC)
    replay(p, "exit-0", until=6)
    waiter = Waiter("job-exec-1")
    handle(p, WaitRequested(waiter))
    actions = replay(p, "exit-0", until=10, since=6)  # to active/exited
    assert actions[-2:] == [AnswerWait(waiter, 0), ArmGrace(ANSWER_GRACE)]
    assert handle(p, GraceExpired()) == [StopUnit()]


def test_an_answered_error_is_revived_as_the_same_error():
    """An adopted unit that turns out not to have exec'd answers its parked wait with
    ENOENT; a lost answer revives it with the same error."""
    p = new(["sh"], label="L", background=True, waitable=True, adopted=True)
    handle(p, UnitChanged({"ActiveState": "activating", "SubState": "start"}))
    handle(p, WaitRequested(Waiter("a")))
    props = {"ActiveState": "failed", "SubState": "failed", "Result": "exit-code"}
    props.update({"ExecMainPID": 9, "ExecMainCode": 1, "ExecMainStatus": 203})
    handle(p, UnitChanged(props))
    assert p.state is S.ANSWERED
    handle(p, AnswerMaybeLost())
    again = Waiter("b")
    answer = handle(p, WaitRequested(again))[0]
    assert answer.waiter is again and answer.error[0] == errno.ENOENT


def adopted_failed(label="L"):
    """An adopted unit found failed at load (exit 3): a held zombie."""
    p = new(["sh"], label=label, background=True, waitable=True, adopted=True)
    props = {"ActiveState": "failed", "SubState": "failed", "Result": "exit-code"}
    props.update({"ExecMainPID": 9, "ExecMainCode": 1, "ExecMainStatus": 3})
    return p, handle(p, UnitChanged(props))


def test_an_adopted_zombie_is_held_from_the_first_wait_then_let_go():
    """A unit an earlier sdexec left (a revived record handed over, or a shell that ended
    while sdexec was unloaded) is collectable for CLAIM_WINDOW counted from the first wait
    since load (job-exec loaded at last); nobody asking for it then, it goes."""
    p, actions = adopted_failed()
    assert actions[-1] == ArmGrace(FIRST_WAIT_BOUND)
    assert p.state is S.ZOMBIE and p.visible and p.wait.claim is not Claim.NONE
    text = f"L[9]: a client waits: collectable for {CLAIM_WINDOW:g}s"
    assert handle(p, ClaimsStart("a client waits")) == [
        Log(syslog.LOG_INFO, text),
        ArmGrace(CLAIM_WINDOW),
    ]
    text = f"L[9]: not collected within {CLAIM_WINDOW:g}s, let go"
    assert handle(p, GraceExpired()) == [Log(syslog.LOG_INFO, text), ResetFailedUnit()]


def test_an_adopted_zombie_outlasts_the_hold_while_no_wait_came():
    """A slow rank delays job-exec's load past CLAIM_WINDOW: the record stays (the hold has
    not begun), the timer armed is the FIRST_WAIT_BOUND."""
    p, actions = adopted_failed()
    text = (
        f"L[9]: no waiter after adoption: collectable for {CLAIM_WINDOW:g}s after the first "
        f"wait (at most {FIRST_WAIT_BOUND:g}s)"
    )
    assert actions[-2:] == [Log(syslog.LOG_INFO, text), ArmGrace(FIRST_WAIT_BOUND)]
    assert FIRST_WAIT_BOUND > 4 * 120  # the upgrade's longest way to job-exec's load
    text = f"L[9]: job-exec loaded: collectable for {CLAIM_WINDOW:g}s"
    assert handle(p, ClaimsStart("job-exec loaded")) == [
        Log(syslog.LOG_INFO, text),
        ArmGrace(CLAIM_WINDOW),
    ]
    waiter = Waiter("job-exec-2")
    assert handle(p, WaitRequested(waiter)) == [AnswerWait(waiter, 3 << 8), ResetFailedUnit()]


def test_an_adopted_zombie_no_wait_ever_comes_for_goes_at_the_bound():
    p, _ = adopted_failed()
    text = f"L[9]: not collected within {FIRST_WAIT_BOUND:g}s, let go"
    assert handle(p, GraceExpired()) == [Log(syslog.LOG_INFO, text), ResetFailedUnit()]


def test_an_adopted_process_that_ends_after_the_first_wait_is_held_for_the_hold():
    p = new(["sh"], label="L", background=True, waitable=True, adopted=True)
    handle(p, UnitChanged({"ActiveState": "active", "SubState": "running", "ExecMainPID": 9}))
    assert handle(p, ClaimsStart("a client waits")) == [] and p.state is S.RUNNING
    exited = {"ActiveState": "active", "SubState": "exited", "ExecMainCode": 1}
    actions = handle(p, UnitChanged({**exited, "ExecMainStatus": 0}))
    assert actions[-1] == ArmGrace(CLAIM_WINDOW) and p.state is S.ZOMBIE


def test_the_first_wait_changes_nothing_for_a_collected_record():
    p, _ = adopted_failed()
    handle(p, ClaimsStart("a client waits"))
    assert handle(p, ClaimsStart("a client waits")) == []


def test_an_adopted_zombie_collected_within_the_hold_goes_at_once():
    """The reattached job-exec asks by label: answered at once, the unit let go."""
    p = new(["sh"], label="L", background=True, waitable=True, adopted=True)
    props = {"ActiveState": "active", "SubState": "exited", "ExecMainPID": 9}
    props.update({"ExecMainCode": 1, "ExecMainStatus": 0})
    handle(p, UnitChanged(props))
    waiter = Waiter("job-exec-2")
    assert handle(p, WaitRequested(waiter)) == [AnswerWait(waiter, 0), StopUnit()]
    assert p.wait.claim is Claim.NONE
    assert handle(p, GraceExpired()) == []  # the hold's timer, already armed, is stale


def test_a_zombie_of_our_own_exec_waits_for_its_wait_unbounded():
    """A process this sdexec started, with no wait yet: no hold (flux-core's semantics)."""
    p = running()
    assert replay(p, "exit-1", until=until_failed("exit-1"), since=6)[-1] == Log(
        syslog.LOG_INFO, f"shell-0-f1[{p.pid}]: Exit 1"
    )
    assert p.state is S.ZOMBIE and p.wait.claim is Claim.NONE
