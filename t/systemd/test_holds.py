"""holds.py on a real user manager: a unit that ends inactive (STOPPING=1, as the IMP)
stays loaded with its exit status while held, and goes once released or the holder leaves."""

import logging
import time

from conftest import systemctl

from flux_sdexec.systemd.holds import Holds

NOTIFY = (("Type", "s", "notify"), ("NotifyAccess", "s", "all"), ("RemainAfterExit", "b", False))


def shown(unit):
    out = systemctl("show", "-p", "LoadState,ActiveState,ExecMainStatus", unit).stdout
    return sorted(out.split())


def unloaded(unit, timeout=5.0):
    """True once systemd no longer has ``unit`` loaded (polled, bounded)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "LoadState=not-found" in shown(unit):
            return True
        time.sleep(0.05)
    return False


def ended_inactive(sd, holds, gate):
    """A unit that goes inactive with exit 0 while ``holds`` holds it: its name."""
    script = (
        f"systemd-notify --ready; while ! test -e {gate}; do sleep 0.05; done; "
        "systemd-notify STOPPING=1; sleep 0.2"
    )
    unit = sd.start(["/bin/sh", "-c", script], *NOTIFY)
    sd.wait_state(unit, "active", "running")
    holds.hold(unit, wait=True)
    gate.touch()
    sd.wait_state(unit, "inactive", "dead")
    return unit


def test_a_held_unit_stays_loaded_once_ended_inactive_until_released(sd, tmp_path):
    holds = Holds(logging.getLogger("test"))
    try:
        unit = ended_inactive(sd, holds, tmp_path / "gate")
        assert shown(unit) == ["ActiveState=inactive", "ExecMainStatus=0", "LoadState=loaded"]
        holds.release(unit)
        assert unloaded(unit)
    finally:
        holds.close()


def test_held_units_go_when_the_holder_closes(sd, tmp_path):
    holds = Holds(logging.getLogger("test"))
    unit = ended_inactive(sd, holds, tmp_path / "gate")
    assert "LoadState=loaded" in shown(unit)
    holds.close()
    assert unloaded(unit)


def test_without_a_hold_such_a_unit_is_unloaded_at_once(sd, tmp_path):
    """What holds.py is for: systemd forgets the unit and its exit status."""
    gate = tmp_path / "gate"
    script = f"systemd-notify --ready; while ! test -e {gate}; do sleep 0.05; done; "
    unit = sd.start(["/bin/sh", "-c", script + "systemd-notify STOPPING=1; sleep 0.2"], *NOTIFY)
    sd.wait_state(unit, "active", "running")
    gate.touch()
    sd.wait_state(unit, "inactive", "dead")
    assert unloaded(unit)
