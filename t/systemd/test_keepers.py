"""keepers.py on a real user manager: a unit that ends inactive (STOPPING=1, as the IMP)
with no reference over any bus stays loaded, exit status included, while its keeper runs;
stopping the keeper unloads both, and stopping the unit stops its keeper."""

from conftest import exec_props, systemctl
from test_holds import NOTIFY, shown, unloaded

from flux_sdexec.systemd.keepers import with_keeper


def start_with_keeper(sd, gate):
    """A notify unit with its keeper, running until ``gate`` exists: (unit, keeper)."""
    script = (
        f"systemd-notify --ready; while ! test -e {gate}; do sleep 0.05; done; "
        "systemd-notify STOPPING=1; sleep 0.2"
    )
    unit = sd.new_unit()
    props, aux, keeper = with_keeper(unit, exec_props(["/bin/sh", "-c", script], *NOTIFY))
    sd.units.append(keeper)  # cleaned up (and checked gone) with the unit
    sd.bridge.start_transient_unit(unit, props, aux=aux)
    sd.wait_state(unit, "active", "running")
    return unit, keeper


def active(unit):
    return systemctl("show", "-p", "ActiveState", "--value", unit).stdout.strip()


def gone(unit, keeper):
    """Both unloaded (a slice shows LoadState=loaded even unknown: systemd loads any slice
    name without a file; list-units lists only what is loaded)."""
    listed = systemctl("list-units", "--all", "--plain", "--no-legend", keeper).stdout
    return unloaded(unit) and listed.strip() == ""


def test_the_keeper_keeps_an_ended_unit_loaded_until_it_stops(sd, tmp_path):
    unit, keeper = start_with_keeper(sd, tmp_path / "gate")
    assert active(keeper) == "active"
    (tmp_path / "gate").touch()
    sd.wait_state(unit, "inactive", "dead")
    assert shown(unit) == ["ActiveState=inactive", "ExecMainStatus=0", "LoadState=loaded"]
    systemctl("stop", keeper)
    assert gone(unit, keeper)


def test_a_stop_of_the_unit_stops_its_keeper(sd, tmp_path):
    unit, keeper = start_with_keeper(sd, tmp_path / "gate")
    systemctl("stop", unit)
    assert gone(unit, keeper)
