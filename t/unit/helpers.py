"""Building SdProcs and feeding them inputs the way the adapters do, from recorded systemd
signals (t/fixtures/, captured by t/fixtures/record.py) or by hand."""

import json
import pathlib
import signal

from flux_sdexec.containment.enforcement import PostStartCheck
from flux_sdexec.core.events import OutputClosed, UnitChanged
from flux_sdexec.core.machine import handle
from flux_sdexec.core.protocol import DEFAULT_BUFSIZE, ExecRequest
from flux_sdexec.core.sdproc import SdProc
from flux_sdexec.core.states import ProcState

# a post-start check as a constrained job shell asks for it (opaque to the core)
CHECK = PostStartCheck({"AllowedCPUs": "0"}, constrained=True)


def new(
    cmdline=("/bin/true",),
    streams=(),
    label=None,
    background=False,
    waitable=False,
    stop_timer_sec=None,
    stop_signal=signal.SIGKILL,
    post_start_check=None,
    adopted=False,
    request="exec-request",
    unit="u.service",
    line_buffer=True,
    bufsize=DEFAULT_BUFSIZE,
):
    """An SdProc for ``unit``, as the exec handler (or adoption) makes it; ``line_buffer``
    and ``bufsize`` are both output streams' options."""
    cmd = ExecRequest(
        cmdline=list(cmdline),
        env={},
        label=label,
        background=background,
        waitable=waitable,
        streams=tuple(streams),
        stop_timer_sec=stop_timer_sec,
        stop_signal=stop_signal,
        post_start_check=post_start_check,
        line_buffer={"stdout": line_buffer, "stderr": line_buffer},
        bufsize={"stdout": bufsize, "stderr": bufsize},
    )
    return SdProc(None if adopted else request, cmd, unit, adopted=adopted)


def feed(proc, *events):
    """Handle each input in turn; return all the actions."""
    actions = []
    for event in events:
        actions += handle(proc, event)
    return actions


FIXTURES = pathlib.Path(__file__).parent.parent / "fixtures"
EXEC_FAIL_TEXT = "unit process could not be started (systemd error 203, result exit-code)"


def signals(name):
    return json.loads((FIXTURES / f"{name}.json").read_text())["signals"]


def replay(proc, name, until=None, since=0):
    """Feed a recorded sequence, as the adapter would until the process is done."""
    actions = []
    for props in signals(name)[since:until]:
        if proc.state is ProcState.DONE:
            break  # the adapter stops watching a reaped unit
        actions += handle(proc, UnitChanged(props))
    return actions


def until_state(name, active_state):
    """The signals up to and including the first that reports ``active_state``."""
    return 1 + next(i for i, s in enumerate(signals(name)) if s.get("ActiveState") == active_state)


def pid_of(name):
    return next(s["ExecMainPID"] for s in signals(name) if s.get("ExecMainPID"))


def fg(**kw):
    return new(["/bin/true"], streams=("stdout", "stderr"), **kw)


def waitable():
    return new(
        ["/bin/false"],
        label="L",
        background=True,
        waitable=True,
        streams=("stdout", "stderr"),
    )


def finish(proc, name):
    replay(proc, name)
    handle(proc, OutputClosed("stdout"))
    return handle(proc, OutputClosed("stderr"))


def until_failed(name):
    """The signals up to systemd's first failed/failed, where a kept record stops."""
    return until_state(name, "failed")
