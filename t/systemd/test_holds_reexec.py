"""holds.py under daemon-reexec (issue 33, defect 9: units left loaded after a reexec storm).

systemd keeps the references of a bus client through a reexec, but a Ref or Unref it had not
answered when it re-executed is answered by the bus daemon. Taking that answer for systemd's
left each such unit loaded until sdexec closed its connections. Here units are released one
every 10 ms while the manager re-executes twice: every one must go while the holds' connection
stays open. (Before the fix 18-22 of 40 such units stayed loaded.)
"""

import logging
import subprocess
import time

import pytest

from conftest import systemctl

flux = pytest.importorskip("flux", reason="flux's Python bindings are not installed")

from flux_sdexec.systemd.holds import Holds  # noqa: E402
from flux_sdexec.broker.watchers import Watchers  # noqa: E402

LOG = logging.getLogger("test")
UNITS = 60
STEP = 0.01  # seconds between releases
BOUND = 30.0  # seconds for every release to be over
GONE_TIMEOUT = 10.0


def loaded(units):
    out = systemctl("list-units", "--all", "--plain", "--no-legend", *units).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def test_units_released_during_reexecs_are_all_unloaded(sd):
    h = flux.Flux("loop://")
    released = []
    holds = Holds(LOG, Watchers(h, LOG), on_released=lambda unit, lost: released.append(unit))
    reexecs = None
    try:
        units = [sd.start(["sleep", "600"]) for _ in range(UNITS)]
        for unit in units:
            sd.wait_state(unit, "active", "running")
            holds.hold(unit, wait=True)
        systemctl("stop", *units)
        assert loaded(units) == sorted(units)  # ended, kept by the holds
        reexecs = subprocess.Popen(
            ["sh", "-c", "systemctl --user daemon-reexec && systemctl --user daemon-reexec"]
        )
        left = iter(units)

        def release_next(*_):
            unit = next(left, None)
            if unit is not None:
                holds.release(unit)
            elif len(released) == UNITS or time.monotonic() > deadline:
                h.reactor_stop()

        deadline = time.monotonic() + BOUND
        step = h.timer_watcher_create(0.0, release_next, repeat=STEP)
        step.start()
        h.reactor_run()
        step.stop()
        assert reexecs.wait(timeout=60) == 0
        assert sorted(released) == sorted(units)
        gone_by = time.monotonic() + GONE_TIMEOUT
        while loaded(units) and time.monotonic() < gone_by:
            time.sleep(0.1)
        assert loaded(units) == [], "units released but still loaded (held by the connection)"
    finally:
        if reexecs is not None and reexecs.poll() is None:
            reexecs.wait(timeout=60)
        holds.close()
