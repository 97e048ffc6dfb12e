"""Which units a clean unload leaves running for the next sdexec to adopt.

An sdexec reloaded while its instance runs (a package upgrade) should not cost the
jobs it runs: a waitable background process whose start was reported is left to
systemd, and the next sdexec adopts its unit at load (as after a crash), so that
job-exec's bgexec finds its job shell again by label. Everything else stops as
before: a foreground process (its client's stream ends with the unload), a
non-waitable one (nobody could ever collect it), one that failed or is being let
go. When the instance is shutting down, or the broker cannot say what it is doing,
every unit stops: nothing may outlive the instance.

Pure: stdlib and the core only.
"""

from flux_sdexec.states import ProcState

KEEP_WAITABLE = "keep-waitable"  # the default
STOP_ALL = "stop-all"  # the unload of sdexec before the upgrade procedure existed
POLICIES = (KEEP_WAITABLE, STOP_ALL)

# The broker state-machine state in which the instance keeps running after an unload.
# Earlier states (rc1 still running) run no jobs worth keeping; later ones are shutdown.
RUN_STATE = "run"

_HANDED_OVER = frozenset({ProcState.RUNNING, ProcState.FINISHED, ProcState.ZOMBIE})


def instance_stays(policy, broker_state):
    """True when this unload may leave units behind.

    Args:
        policy: ``[systemd] sdexec-unload``, one of POLICIES.
        broker_state: the local broker's state-machine state, or None when unknown.
    """
    return policy == KEEP_WAITABLE and broker_state == RUN_STATE


def keepable(proc):
    """True for a process the next sdexec can adopt and report: waitable, its start
    reported, no error stored, its unit still loaded, not already being let go."""
    return (
        proc.keeps_record
        and proc.error is None
        and proc.state in _HANDED_OVER
        and not proc.status.gone
    )


def units_to_keep(procs, policy, broker_state):
    """The unit names of ``procs`` that this unload leaves running (a set)."""
    if not instance_stays(policy, broker_state):
        return set()
    return {proc.unit for proc in procs if keepable(proc)}
