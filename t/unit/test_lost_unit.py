"""A running unit its systemd manager no longer has after a reconnect (the manager was
killed and started again): the process ends as killed, instead of running forever."""

import errno

from flux_sdexec.adapters.cgroup import pid_in_unit
from flux_sdexec.events import Reap, Respond, RespondError, UnitChanged
from flux_sdexec.machine import handle
from flux_sdexec.states import ProcState
from flux_sdexec.unitstate import lost_signals

from helpers import new, pid_of, replay, until_state

SHELL = "imp-shell-1-fA:sys.service"


def test_a_running_process_whose_unit_is_lost_finishes_killed():
    proc = new(["sleep"], streams=())
    replay(proc, "sigterm", until=until_state("sigterm", "active"))
    assert proc.state is ProcState.RUNNING
    actions = []
    for props in lost_signals(pid_of("sigterm")):
        actions += handle(proc, UnitChanged(props))
    assert Respond({"type": "finished", "status": 9}) in actions
    assert actions[-2:] == [RespondError(errno.ENODATA), Reap()]
    assert proc.state is ProcState.DONE


def test_pid_in_unit_reads_the_process_cgroups(tmp_path):
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "cgroup").write_text(
        f"9:name=systemd:/s.slice/user@9.service/app.slice/{SHELL}\n"
        f"0::/s.slice/user@9.service/app.slice/{SHELL}\n"
    )
    assert pid_in_unit(42, SHELL, proc=str(tmp_path))
    assert not pid_in_unit(42, "imp-shell-1-fB:sys.service", proc=str(tmp_path))
    assert not pid_in_unit(43, SHELL, proc=str(tmp_path))  # gone
