"""Building SdProcs and feeding them inputs the way the adapters do."""

import signal

from flux_sdexec.containment.enforcement import PostStartCheck
from flux_sdexec.machine import handle
from flux_sdexec.protocol import ExecRequest
from flux_sdexec.sdproc import SdProc

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
):
    """An SdProc for ``unit``, as the exec handler (or adoption) makes it."""
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
    )
    return SdProc(None if adopted else request, cmd, unit, adopted=adopted)


def feed(proc, *events):
    """Handle each input in turn; return all the actions."""
    actions = []
    for event in events:
        actions += handle(proc, event)
    return actions
