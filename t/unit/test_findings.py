"""Bugs found by reading the core against its anchors (issue 9), one test each.

Finding 4 (watcher callbacks without a guard) needs flux's watchers: it is in
t/unit/test_channels.py.
"""

import errno
import pathlib
import re
import shutil
import subprocess
import sys
import syslog

import pytest

from flux_sdexec.core.events import (
    ContainmentChecked,
    AnswerWait,
    ArmTimer,
    CancelTimer,
    CloseChannels,
    Log,
    OutputClosed,
    Reap,
    RespondError,
    StopTimerExpired,
    StopUnit,
    UnitChanged,
    WaitRequested,
)
from flux_sdexec.core import table
from flux_sdexec.core.machine import fail, handle
from flux_sdexec.core.states import ProcState

from helpers import feed, new


def vars_of(obj):
    return {name: getattr(obj, name) for name in obj.__slots__}


def fields_of(proc):
    """Every field of SdProc ``proc``, a sub-record's named ``record.field``."""
    fields = dict(vars(proc), unit=vars_of(proc.unit), out=vars_of(proc.out))
    for record in ("calls", "answers", "wait"):
        fields.update({f"{record}.{k}": v for k, v in vars_of(fields.pop(record)).items()})
    return fields


TOP = pathlib.Path(__file__).resolve().parents[2]
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


def vermin_command():
    """vermin under this interpreter, else the one on PATH (make deps installs it with pip
    for the developer's python3; flux's interpreter may be another): it reads code, so any
    interpreter does."""
    try:
        import vermin  # noqa: F401
    except ImportError:
        path = shutil.which("vermin")
        if path is None:
            pytest.skip("vermin not installed (make deps)")
        return [path]
    return [
        sys.executable,
        "-c",
        "import sys, vermin; sys.argv[0] = 'vermin'; sys.exit(vermin.main())",
    ]


def test_setup_py_tells_the_true_minimum_python():
    """Finding 5: python_requires in setup.py is the minimum vermin finds for the code."""
    declared = re.search(r'python_requires=">=([0-9.]+)"', (TOP / "setup.py").read_text())
    out = subprocess.run(
        [*vermin_command(), "--no-tips", "--eval-annotations", "flux_sdexec"],
        cwd=TOP,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = re.search(r"Minimum required versions: ([0-9.]+)", out)
    assert found.group(1) == declared.group(1)


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
