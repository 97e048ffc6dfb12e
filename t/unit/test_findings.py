"""Bugs found by reading the core against its anchors (issue 9), one test each."""

import errno
import pathlib
import re
import subprocess
import shutil

import pytest

from flux_sdexec.events import (
    CancelTimer,
    OutputClosed,
    PostStartCheckFailed,
    Reap,
    RespondError,
    StopTimerExpired,
    UnitChanged,
    WaitRequested,
    ArmTimer,
    Respond,
)
from flux_sdexec.proc import Proc
from flux_sdexec.states import ProcState

TOP = pathlib.Path(__file__).resolve().parents[2]
RUNNING = [
    {"ActiveState": "activating", "SubState": "start"},
    {"ExecMainPID": 7},
    {"ActiveState": "active", "SubState": "running"},
]


def feed(proc, *events):
    actions = []
    for event in events:
        actions += proc.handle(event)
    return actions


def test_wait_answered_while_deactivating_cancels_the_stop_timer():
    """Finding 1: a waitable process exits while its unit is deactivating and a wait is
    parked: the wait gets the status and the stop timer is cancelled, so no signal is sent
    to a process whose status was handed out and later expiries do nothing."""
    proc = Proc("u.service", ["sh"], background=True, waitable=True, stop_timer_sec=1)
    feed(proc, *map(UnitChanged, RUNNING), WaitRequested("w"))
    assert proc.handle(UnitChanged({"ActiveState": "deactivating", "SubState": "stop"})) == [
        ArmTimer(1)
    ]
    actions = proc.handle(UnitChanged({"ExecMainCode": 2, "ExecMainStatus": 15}))
    assert Respond({"status": 15}, to="w") in actions and CancelTimer() in actions
    assert feed(proc, StopTimerExpired(), StopTimerExpired(), StopTimerExpired()) == []


def test_unit_gone_without_exit_status_fails_the_request_once():
    """Finding 2: a foreground unit that goes inactive/dead without ever reporting
    ExecMainCode, stdout still open: the last EOF answers one EINVAL and reaps."""
    proc = Proc("u.service", ["sh"], streams=("stdout", "stderr"))
    feed(proc, *map(UnitChanged, RUNNING))
    feed(proc, UnitChanged({"ActiveState": "inactive", "SubState": "dead"}), OutputClosed("stdout"))
    assert proc.handle(OutputClosed("stderr")) == [
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
    proc = Proc("u.service", ["sh"], streams=("stdout",))
    feed(proc, *map(UnitChanged, RUNNING))
    actions = proc.handle(PostStartCheckFailed("too late"))
    assert [type(a).__name__ for a in actions][:2] == ["Log", "RespondError"]
    assert actions[1].errnum == errno.EINVAL and "too late" not in actions[1].text
    assert proc.state in (ProcState.RELEASING, ProcState.DONE)
    later = feed(proc, UnitChanged({"ActiveState": "inactive", "SubState": "dead"}))
    assert not [a for a in later if isinstance(a, (Respond, RespondError))]


def test_setup_py_tells_the_true_minimum_python():
    """Finding 5: python_requires in setup.py is the minimum vermin finds for the code."""
    if shutil.which("vermin") is None:
        pytest.skip("vermin not installed (pip install vermin)")
    declared = re.search(r'python_requires=">=([0-9.]+)"', (TOP / "setup.py").read_text())
    out = subprocess.run(
        ["vermin", "--no-tips", "--eval-annotations", "flux_sdexec"],
        cwd=TOP,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = re.search(r"Minimum required versions: ([0-9.]+)", out)
    assert found.group(1) == declared.group(1)
