"""When the adapter stops a unit's accounting slice, and what a stop that did not go through
becomes (the sweeper's). No flux, no systemd: a bridge that answers each stop at once."""

import errno
import types

import pytest
from stubs import StubSweeper
from test_usage import SLICE, UNIT, Proc, accounting, tree

from flux_sdexec.containment import cgroups
from flux_sdexec.core.errors import UnitError
from flux_sdexec.core.states import ProcState


class Stops:
    def __init__(self, answer=None):
        self.stopped = []
        self.answer = answer  # what systemd answers each stop (None: done)

    def stop_unit(self, name, on_reply=None, **kwargs):
        self.stopped.append(name)
        on_reply(self.answer)


@pytest.mark.parametrize(
    "gone, active, stop_sent, reset_sent, opts, stopped",
    [
        (True, "inactive", False, False, {}, True),  # the unit went
        (False, "active", True, False, {}, True),  # sdexec stopped it (a waitable, waited)
        (False, "failed", False, True, {}, True),  # sdexec reset it
        (False, "deactivating", False, False, {}, True),  # stopping (sent nothing at unload)
        (False, "active", False, False, {}, False),  # let go active: kept for the next
        (True, "inactive", False, False, {"SDEXEC_PROP_Slice": "x.slice"}, False),  # client's
    ],
)
def test_the_slice_is_stopped_once_sdexec_is_done_with_a_unit_going_away(
    tmp_path, gone, active, stop_sent, reset_sent, opts, stopped
):
    bridge = Stops()
    acc = accounting(tree(tmp_path, cgroups.UNIFIED), bridge=bridge, sweeper=StubSweeper())
    stopping = active == "deactivating"
    unit = types.SimpleNamespace(name=UNIT, pid=None, finished=False, gone=gone, stopping=stopping)
    p = Proc(
        unit=unit,
        cmd=types.SimpleNamespace(opts=opts, label=None),
        state=ProcState.DONE,
        calls=types.SimpleNamespace(stop_sent=stop_sent, reset_sent=reset_sent),
    )
    if not opts:
        acc.adopted(p, {"Slice": SLICE})  # in a slice of its own
    acc.done(p)
    acc.done(p)  # once only
    assert bridge.stopped == ([SLICE] if stopped else [])


def done_proc(acc, gone):
    """A record sdexec is done with, of a unit with an accounting slice (``gone``: seen end)."""
    unit = types.SimpleNamespace(name=UNIT, pid=None, finished=False, gone=gone, stopping=False)
    p = Proc(
        unit=unit,
        cmd=types.SimpleNamespace(opts={}, label=None),
        state=ProcState.DONE,
        calls=types.SimpleNamespace(stop_sent=False, reset_sent=False),
    )
    acc.adopted(p, {"Slice": SLICE})
    return p


@pytest.mark.parametrize(
    "answer, swept",
    [
        (UnitError(errno.ECONNRESET, "lost connection to systemd"), [SLICE]),  # a reexec
        (UnitError(errno.ETIMEDOUT, "systemd did not answer"), [SLICE]),
        (UnitError(errno.ENOENT, "Unit not loaded."), []),  # already gone
    ],
)
def test_a_slice_stop_that_did_not_go_through_goes_to_the_sweeper(tmp_path, answer, swept):
    """A stop lost to a manager reexec left the slice running for good (chaos seed 12)."""
    sweeper = StubSweeper()
    acc = accounting(tree(tmp_path, cgroups.UNIFIED), bridge=Stops(answer), sweeper=sweeper)
    acc.done(done_proc(acc, gone=True))
    assert sweeper.swept == swept


def test_the_slice_of_a_unit_left_to_the_sweeper_is_stopped_too(tmp_path):
    """A start systemd never answered (the unit swept, never seen): its slice was left."""
    bridge = Stops()
    acc = accounting(tree(tmp_path, cgroups.UNIFIED), bridge=bridge, sweeper={UNIT})
    acc.done(done_proc(acc, gone=False))
    assert bridge.stopped == [SLICE]
