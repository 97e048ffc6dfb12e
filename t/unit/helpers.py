"""Building SdProcs and feeding them inputs the way the adapters do."""

import signal

from flux_sdexec.machine import handle
from flux_sdexec.protocol import ExecRequest
from flux_sdexec.sdproc import SdProc


def new(
    cmdline=("/bin/true",),
    streams=(),
    label=None,
    background=False,
    waitable=False,
    stop_timer_sec=None,
    stop_signal=signal.SIGKILL,
    expected_cpus=None,
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
        expected_cpus=expected_cpus,
    )
    return SdProc(None if adopted else request, cmd, unit, adopted=adopted)


def feed(proc, *events):
    """Handle each input in turn; return all the actions."""
    actions = []
    for event in events:
        actions += handle(proc, event)
    return actions
