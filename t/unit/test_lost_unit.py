"""A running unit its systemd manager no longer has after a reconnect (the manager was
killed and started again): the exec ends with an error saying so (ECONNRESET; job-exec then
raises "job shell exec error on broker <host> (rank N): <text>"), not running forever, and
not with a bare "killed" status that names nothing."""

import errno

from flux_sdexec.broker.containment_check import pid_in_unit
from flux_sdexec.core.events import (
    AnswerWait,
    Reap,
    RespondError,
    UnitChanged,
    UnitLost,
    WaitRequested,
)
from flux_sdexec.core.machine import handle
from flux_sdexec.core.states import ProcState
from flux_sdexec.core.unitstate import lost_signals

from helpers import new, pid_of, replay, until_state

SHELL = "imp-shell-1-fA:sys.service"


LOST = "the systemd manager restarted without sigterm.service: its processes were signalled"


def _lose(proc):
    actions = handle(proc, UnitLost(LOST))
    for props in lost_signals(pid_of("sigterm")):
        actions += handle(proc, UnitChanged(props))
    return actions


def test_a_running_foreground_exec_whose_unit_is_lost_ends_with_the_error():
    proc = new(["sleep"], streams=())
    replay(proc, "sigterm", until=until_state("sigterm", "active"))
    assert proc.state is ProcState.RUNNING
    actions = _lose(proc)
    assert not [a for a in actions if type(a).__name__ == "Respond"]  # no "finished"
    assert actions[-2:] == [RespondError(errno.ECONNRESET, LOST), Reap()]
    assert proc.state is ProcState.DONE


def test_a_lost_background_unit_answers_its_wait_with_the_error():
    proc = new(["sleep"], label="L", background=True, waitable=True)
    replay(proc, "sigterm", until=until_state("sigterm", "active"))
    handle(proc, WaitRequested("waiter"))
    actions = _lose(proc)
    assert AnswerWait("waiter", error=(errno.ECONNRESET, LOST)) in actions


def test_pid_in_unit_reads_the_process_cgroups(tmp_path):
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "cgroup").write_text(
        f"9:name=systemd:/s.slice/user@9.service/app.slice/{SHELL}\n"
        f"0::/s.slice/user@9.service/app.slice/{SHELL}\n"
    )
    assert pid_in_unit(42, SHELL, proc=str(tmp_path))
    assert not pid_in_unit(42, "imp-shell-1-fB:sys.service", proc=str(tmp_path))
    assert not pid_in_unit(43, SHELL, proc=str(tmp_path))  # gone
