"""Review 2026-12b finding 6 on a real user manager: the accounting slices and keepers an
earlier sdexec left (their stop refused or not answered at its unload, or a crash) are found
by their names, ListUnitsByPatterns and all (``\\x2d`` in them), those of this instance and
rank only, and stopped by the unload's bounded second stop (teardown.stop_again)."""

import logging
import time
import uuid

from conftest import systemctl

from flux_sdexec.broker import adopt
from flux_sdexec.systemd import teardown
from flux_sdexec.systemd.keepers import keeper_name
from flux_sdexec.usage.cgroup_usage import accounting_slice
from flux_sdexec.core.naming import UnitNamer

LOG = logging.getLogger("test")


def listed(names):
    return systemctl("list-units", "--all", "--plain", "--no-legend", *names).stdout.strip()


def gone(names, timeout=5.0):
    """True once systemd has none of ``names`` loaded (polled, bounded)."""
    deadline = time.monotonic() + timeout
    while listed(names):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_leftover_slices_are_found_and_stopped(sd):
    instance = f"tpy{uuid.uuid4().hex[:8]}"
    namer = UnitNamer(instance, 0, rank_suffix=True)
    unit = namer.name("imp-shell-0-fA1")  # imp-shell-0-fA1-0:<instance>.service
    ours = [accounting_slice(unit, "0a1b2c3d"), keeper_name(unit)]
    elsewhere = UnitNamer(instance, 1, rank_suffix=True).name("imp-shell-0-fA1")
    theirs = [accounting_slice(elsewhere, "0a1b2c3d"), keeper_name(elsewhere)]
    for name in ours + theirs:
        sd.units.append(name)  # cleaned up, and checked gone, after the test
        sd.bridge.start_transient_unit(name, [("Description", "s", "pytest: a leftover")])
    assert "\\x2d" in ours[0] and len(listed(ours + theirs).splitlines()) == 4
    assert sorted(adopt.leftover_slices(sd.bridge, namer, set())) == sorted(ours)  # none in use
    teardown.stop_again(sd.bridge, LOG, ours)
    assert gone(ours)
    assert len(listed(theirs).splitlines()) == 2  # another rank's: untouched
