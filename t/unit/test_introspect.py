"""What stats-get adds for flux sdexec status: how systemd is reached, processes per state;
what sdexec.units says of a suspect or orphan shell."""

from flux_sdexec.broker import introspect
from flux_sdexec.core.events import JobGone, WaitRequested
from flux_sdexec.core.machine import handle
from flux_sdexec.core.protocol import ExecRequest
from flux_sdexec.core.sdproc import SdProc
from flux_sdexec.core.states import ProcState

from test_orphans import shell


def test_systemd_link_private_socket_or_bus():
    """A socket path is the private connection; anything else (the bridge's bus name) the bus."""
    path = "/run/user/0/systemd/private"
    assert introspect.systemd_link(path) == {"kind": "private", "via": path}
    assert introspect.systemd_link("the user bus") == {"kind": "bus", "via": "the user bus"}


def test_tracked_counts_every_live_state_counted():
    """Every state but DONE has a count, zero when no process is in it."""
    procs = []
    for n, state in enumerate(
        (ProcState.RUNNING, ProcState.RUNNING, ProcState.ZOMBIE, ProcState.STARTING)
    ):
        p = SdProc(None, ExecRequest(cmdline=["true"], env={}), f"u{n}:tX.service")
        p.state = state
        procs.append(p)
    assert introspect.tracked_counts(procs) == {
        "starting": 1,
        "running": 2,
        "finished": 0,
        "failed": 0,
        "zombie": 1,
        "answered": 0,
        "releasing": 0,
    }


def test_proc_entry_shows_what_a_suspect_shell_s_job_was_seen_as_only_while_suspect():
    """A job shell nobody waits on: its last job query's answer; waited on again: none; an
    orphan being stopped: its reason."""
    p, seen = shell(), "job fuMFe9D is RUN"
    assert introspect.proc_entry(p, seen)["job"] == "job fuMFe9D is RUN"
    assert introspect.proc_entry(p, seen)["orphan"] is None
    handle(p, WaitRequested("job-exec"))
    assert introspect.proc_entry(p, seen)["job"] is None
    q = shell()
    handle(q, JobGone("job fuMFe9D is inactive"))
    assert introspect.proc_entry(q, None)["orphan"] == "job fuMFe9D is inactive"
