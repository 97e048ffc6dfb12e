"""The guard of handed-over units (guard.py, handoff.py) on a real user manager: once the
broker is gone it stops them as the unload does, the stop signal on the main process of a
unit that outlives its stop (a multi-user job shell: SIGUSR1 to the IMP), then SIGKILL.
"""

import logging
import signal
import subprocess
import time

from conftest import WAIT_TIMEOUT, systemctl

from flux_sdexec.core import handoff
from flux_sdexec.systemd import guard

LOG = logging.getLogger("test")
# as job-exec runs the IMP: only the main process gets the stop's SIGTERM, no stop timeout
IMP_LIKE = (("KillMode", "s", "process"), ("TimeoutStopUSec", "t", 2**64 - 1))


def dead_pid():
    """The pid of a process that has exited (the broker the guard watches, gone)."""
    proc = subprocess.Popen(["/bin/true"])
    proc.wait()
    return proc.pid


def loaded(unit):
    out = systemctl("show", "-p", "LoadState", unit).stdout.strip()
    return out == "LoadState=loaded"


def wait_unloaded(units, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(loaded(u) for u in units):
            return True
        time.sleep(0.1)
    return False


def test_the_guard_sends_the_stop_signal_to_a_unit_its_stop_leaves_running(sd, tmp_path):
    """Before: the guard ran `systemctl --user stop`, which waits forever for such a unit."""
    marker = tmp_path / "usr1"
    script = f'trap "" TERM; trap "touch {marker}; exit 0" USR1; while :; do sleep 0.1; done'
    shell = sd.start(["/bin/sh", "-c", script], *IMP_LIKE)
    plain = sd.start(["/bin/sleep", "1000"])
    for unit in (shell, plain):
        sd.wait_state(unit, "active", "running")
    name = sd.new_unit(f"sdexec-guard-0-pytest{time.monotonic_ns()}.service")
    timers = {shell: (30, signal.SIGUSR1)}
    guard.start(sd.bridge, LOG, name, dead_pid(), {shell, plain}, timers)
    assert handoff.parse_stop_timers(sd.bridge.get_unit_properties(name)["Environment"]) == timers
    # the stop (plain goes), a grace, SIGUSR1 (shell goes): well within two graces and a bit
    assert wait_unloaded([shell, plain], 3 * handoff.GUARD_GRACE + WAIT_TIMEOUT / 2)
    assert marker.exists()
    assert wait_unloaded([name], WAIT_TIMEOUT)
