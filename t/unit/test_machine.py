"""Applying the table (core/machine.py): drafts committed only when the table allows, an
input refused or a handler that raises changes nothing and fails the process once, the
stop-timer rule, and the usage rule (a process with a slice of its own asks for its usage as
its unit's facts change). Driven by PropertiesChanged sequences recorded from systemd
(t/fixtures/), as the lifecycle tests are."""

import errno
import syslog

import pytest

from flux_sdexec.core import table
from flux_sdexec.core.events import (
    AnswerWait,
    ArmTimer,
    CancelTimer,
    CloseChannels,
    ContainmentChecked,
    FindSlices,
    Log,
    OutputClosed,
    ReadUsage,
    Reap,
    Respond,
    RespondError,
    StartFailed,
    StartOutput,
    StopSlice,
    StopTimerExpired,
    StopUnit,
    UnitChanged,
    WaitRequested,
)
from flux_sdexec.core.machine import fail, handle
from flux_sdexec.core.states import ProcState

from helpers import feed, fg, new, pid_of, replay

USAGE = (FindSlices, ReadUsage, StopSlice)


def accounted():
    """A foreground exec in an accounting slice of its own, as Accounting.place marks it."""
    proc = fg()
    proc.accounted = True
    return proc


def test_a_process_with_a_slice_asks_for_its_usage_once_each():
    """Its pid known: find the slices; the exit known: read the usage before the finished
    answer and the stop; done: stop the slice, then reap."""
    proc = accounted()
    assert replay(proc, "exit-0") == [
        FindSlices(),  # its pid, before it is seen running
        Respond({"type": "started", "pid": pid_of("exit-0")}),
        StartOutput(),
        ReadUsage(),
        Respond({"type": "finished", "status": 0}),
        StopUnit(),
    ]
    assert handle(proc, OutputClosed("stdout")) == []
    assert handle(proc, OutputClosed("stderr")) == [
        RespondError(errno.ENODATA),
        StopSlice(),
        Reap(),
    ]


def test_a_process_without_a_slice_asks_for_nothing_of_usage():
    proc = fg()
    actions = replay(proc, "exit-0") + handle(proc, OutputClosed("stdout"))
    actions += handle(proc, OutputClosed("stderr"))
    assert not [a for a in actions if isinstance(a, USAGE)]
    assert actions[-1] == Reap()


def test_a_start_refused_stops_the_slice_it_was_placed_in():
    """No unit ever ran: nothing to find or read, but the slice goes with the process."""
    proc = accounted()
    actions = handle(proc, StartFailed(errno.EEXIST, "exists"))
    assert [a for a in actions if isinstance(a, USAGE)] == [StopSlice()]
    assert actions[-2:] == [StopSlice(), Reap()]


def test_a_process_failed_for_a_refused_input_stops_its_slice():
    """fail() lets the process go: done at once when its unit is gone, its slice too."""
    proc = accounted()
    replay(proc, "exit-0")
    assert proc.unit.gone
    actions = fail(proc, "a bug")
    assert actions[-2:] == [StopSlice(), Reap()]


# found by reading the core against its anchors (issue 9)


def vars_of(obj):
    return {name: getattr(obj, name) for name in obj.__slots__}


def fields_of(proc):
    """Every field of SdProc ``proc``, a sub-record's named ``record.field``."""
    fields = dict(vars(proc), unit=vars_of(proc.unit), out=vars_of(proc.out))
    for record in ("calls", "answers", "wait"):
        fields.update({f"{record}.{k}": v for k, v in vars_of(fields.pop(record)).items()})
    return fields


RUNNING = [
    {"ActiveState": "activating", "SubState": "start"},
    {"ExecMainPID": 7},
    {"ActiveState": "active", "SubState": "running"},
]


def test_wait_answered_while_deactivating_cancels_the_stop_timer():
    """Finding 1: a waitable process exits while its unit is deactivating and a wait is
    parked: the wait gets the status and the stop timer is cancelled, so no signal is sent
    to a process whose status was handed out and later expiries do nothing."""
    proc = new(["sh"], background=True, waitable=True, stop_timer_sec=1)
    feed(proc, *map(UnitChanged, RUNNING), WaitRequested("w"))
    assert handle(proc, UnitChanged({"ActiveState": "deactivating", "SubState": "stop"})) == [
        ArmTimer(1)
    ]
    actions = handle(proc, UnitChanged({"ExecMainCode": 2, "ExecMainStatus": 15}))
    assert AnswerWait("w", 15) in actions and CancelTimer() in actions
    assert feed(proc, StopTimerExpired(), StopTimerExpired(), StopTimerExpired()) == []


def test_unit_gone_without_exit_status_fails_the_request_once():
    """Finding 2: a foreground unit that goes inactive/dead without ever reporting
    ExecMainCode, stdout still open: the last EOF answers one EINVAL and reaps."""
    proc = new(["sh"], streams=("stdout", "stderr"))
    feed(proc, *map(UnitChanged, RUNNING))
    feed(proc, UnitChanged({"ActiveState": "inactive", "SubState": "dead"}), OutputClosed("stdout"))
    assert handle(proc, OutputClosed("stderr")) == [
        RespondError(
            errno.EINVAL,
            "Internal error: unfailed inactive.dead unit never received "
            "ExecMainCode and ExecMainStatus properties.",
        ),
        Reap(),
    ]
    assert proc.state is ProcState.DONE


def test_disallowed_input_changes_nothing_and_fails_the_process_once():
    """Finding 3: an input the table does not allow (a post-start check result for a
    process already reported started) leaves no trace of its handler: the process
    moves to a terminal error that answers the exec request once and releases the unit."""
    proc = new(["sh"], streams=("stdout",))
    feed(proc, *map(UnitChanged, RUNNING))
    before = fields_of(proc)
    text = "internal error: ContainmentChecked in state RUNNING"
    assert handle(proc, ContainmentChecked("too late")) == [
        Log(syslog.LOG_ERR, f"u.service: {text}"),
        RespondError(errno.EINVAL, text),
        CloseChannels(),
        StopUnit(),
    ]
    after = fields_of(proc)
    changed = {k for k in before if before[k] != after[k]}
    assert changed == {"state", "error", "calls.stop_sent"}
    assert proc.state is ProcState.RELEASING and proc.error == (errno.EINVAL, text)
    later = feed(proc, UnitChanged({"ActiveState": "inactive", "SubState": "dead"}))
    assert later == [Reap()]


def test_a_handler_that_raises_leaves_the_process_as_it_was(monkeypatch):
    """Finding 3, the other half: handlers work on a draft, so a handler that fails after
    changing fields changes nothing; the adapter then fails the process once (machine.fail)."""
    proc = new(["sh"], streams=("stdout",))
    feed(proc, *map(UnitChanged, RUNNING))
    before = fields_of(proc)

    def half_done(p, event, out):
        p.error, p.out.eof = (errno.EIO, "half"), True
        raise RuntimeError("bug")

    targets, _ = table.TABLE[(ProcState.RUNNING, OutputClosed)]
    monkeypatch.setitem(table.TABLE, (ProcState.RUNNING, OutputClosed), (targets, half_done))
    with pytest.raises(RuntimeError):
        handle(proc, OutputClosed("stdout"))
    assert fields_of(proc) == before
    text = "internal error: OutputClosed: RuntimeError('bug') in state RUNNING"
    assert fail(proc, "OutputClosed: RuntimeError('bug')")[:2] == [
        Log(syslog.LOG_ERR, f"u.service: {text}"),
        RespondError(errno.EINVAL, text),
    ]
