"""The machine's usage rule (core/machine.py): a process with a slice of its own asks for
its usage as its unit's facts change. Driven by PropertiesChanged sequences recorded from
systemd (t/fixtures/), as the lifecycle tests are."""

import errno

from flux_sdexec.core.events import (
    FindSlices,
    OutputClosed,
    ReadUsage,
    Reap,
    Respond,
    RespondError,
    StartFailed,
    StartOutput,
    StopSlice,
    StopUnit,
)
from flux_sdexec.core.machine import fail, handle

from helpers import fg, pid_of, replay

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
