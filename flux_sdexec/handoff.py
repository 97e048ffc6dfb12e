"""Which units a clean unload leaves running for the next sdexec to adopt.

An sdexec reloaded while its instance runs (a package upgrade) should not cost the
jobs it runs: a waitable background process whose start was reported is left to
systemd, and the next sdexec adopts its unit at load (as after a crash), so that
job-exec's bgexec finds its job shell again by label. Everything else stops as
before: a foreground process (its client's stream ends with the unload), a
non-waitable one (nobody could ever collect it), one that failed or is being let
go. When the instance is shutting down, or the broker cannot say what it is doing,
every unit stops: nothing may outlive the instance. For the same reason the unload
that hands units over starts a guard unit that stops them should the broker exit
before another sdexec took them over (sdexec removed for good while jobs ran).

Pure: stdlib and the core only.
"""

from flux_sdexec.states import ProcState

KEEP_WAITABLE = "keep-waitable"  # the default
STOP_ALL = "stop-all"  # the unload of sdexec before the upgrade procedure existed
POLICIES = (KEEP_WAITABLE, STOP_ALL)

# The broker state-machine state in which the instance keeps running after an unload.
# Before it rc1 is still loading modules; after it (cleanup, shutdown, finalize, ...)
# the instance is ending.
RUN_STATE = "run"

_HANDED_OVER = frozenset({ProcState.RUNNING, ProcState.FINISHED, ProcState.ZOMBIE})


def instance_stays(policy, broker_state):
    """True when this unload may leave units behind.

    Args:
        policy: ``[systemd] sdexec-unload``, one of POLICIES.
        broker_state: the local broker's state-machine state, or None when unknown.
    """
    return policy == KEEP_WAITABLE and broker_state == RUN_STATE


def keepable(p, held=frozenset()):
    """True for a process (SdProc) the next sdexec can adopt and report: waitable, its
    start reported, no error stored, its unit still loaded (not gone, or ended but in
    ``held``: units sdexec keeps loaded, see adapters/systemd/holds.py), not already
    being let go."""
    loaded = not p.unit.gone or p.unit.name in held
    return p.keeps_record and p.error is None and p.state in _HANDED_OVER and loaded


def units_to_keep(procs, policy, broker_state, held=frozenset()):
    """The unit names of ``procs`` that this unload leaves running (a set)."""
    if not instance_stays(policy, broker_state):
        return set()
    return {p.unit.name for p in procs if keepable(p, held)}


# Run by the guard unit: wait for the broker to exit, then stop what was handed over.
_GUARD_SCRIPT = (
    'pid=$1; shift; while kill -0 "$pid" 2>/dev/null; do sleep 1; done; '
    'systemctl --user stop "$@"; systemctl --user reset-failed "$@" 2>/dev/null; exit 0'
)


def guard_unit(instance, rank):
    """The name of the unit that guards this rank's handed-over units.

    Outside every ``*:<instance>.service`` glob (no ``:``), so that no sdexec
    mistakes it for a process of its own.
    """
    return f"sdexec-guard-{rank}-{instance.replace(':', '_')}.service"


def guard_command(broker_pid, units):
    """argv of the guard: if the broker ``broker_pid`` exits before another sdexec
    took ``units`` over (and stopped the guard), stop them, so nothing outlives the
    instance even when sdexec is removed for good while the instance runs."""
    return ["/bin/sh", "-c", _GUARD_SCRIPT, "sdexec-guard", str(broker_pid), *sorted(units)]
