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

One shutdown is different: a site whose broker runs with ``FLUX_DISABLE_JOB_CLEANUP``
(flux-core's rc1 then does not cancel running jobs at shutdown) restarts its instance
under running jobs (``systemctl restart flux`` with ``exec.method = "bgexec"``): job-exec
grafts their state into the KVS, and the restarted instance reattaches to their shells. So
then the waitable units are kept at shutdown too, and the guard gives the next sdexec the
restart grace (``sdexec.restart-grace``) after the broker exited before it stops them.

The stop timer of each unit handed over (its SDEXEC_STOP_TIMER_SEC and _SIGNAL: for a
multi-user job shell, SIGUSR1 to the IMP, which kills the whole job, as the flux user's
manager cannot signal the guest's processes) travels in the guard's environment
(``SDEXEC_STOP_TIMERS``): the guard's stop sends it to the main process of a unit still
running after a grace, as the unload does (teardown.see_units_gone), and the next sdexec
adopts the unit with it. A unit adopted without one (after a crash) that runs the IMP gets
job-exec's signal for IMP shells, SIGUSR1, and IMP_STOP_TIMER_SEC.

The unload decides all of this once, before its first step (``plan_unload``: an
UnloadPlan), then carries the plan out (broker/service.py).

Pure: stdlib and the core only.
"""

import dataclasses
import signal

from flux_sdexec.core.impfatal import runs_imp
from flux_sdexec.core.shelljobs import shell_job
from flux_sdexec.core.states import ProcState

KEEP_WAITABLE = "keep-waitable"  # the default
STOP_ALL = "stop-all"  # the unload of sdexec before the upgrade procedure existed
POLICIES = (KEEP_WAITABLE, STOP_ALL)

# The broker state-machine state in which the instance keeps running after an unload.
# Before it rc1 is still loading modules; after it (cleanup, shutdown, finalize, ...)
# the instance is ending.
RUN_STATE = "run"
DEFAULT_RESTART_GRACE = 300.0  # seconds the guard waits for the restarted instance's sdexec
# The event ``flux sdexec upgrade`` publishes once job-exec is loaded again: each sdexec
# starts the hold of the records it adopted (waits.py), which job-exec is now there to collect.
JOB_EXEC_LOADED = "sdexec.job-exec-loaded"

_HANDED_OVER = frozenset({ProcState.RUNNING, ProcState.FINISHED, ProcState.ZOMBIE})


def can_hand_over(p, held=frozenset()):
    """True for a process (SdProc) the next sdexec can adopt and report: waitable, its
    start reported, no error stored, its unit still loaded (not gone, or ended but in
    ``held``: units sdexec keeps loaded, see systemd/holds.py), not already
    being let go; or a job shell's answered record (in its answer grace, or kept while its
    job runs: waits.py): the job-exec that reattaches asks for it by label, whether or not
    the disconnect that would revive it was seen before this unload."""
    loaded = not p.unit.gone or p.unit.name in held
    answered = p.state is ProcState.ANSWERED and shell_job(p) is not None
    return p.leaves_record and p.error is None and (p.state in _HANDED_OVER or answered) and loaded


@dataclasses.dataclass(frozen=True)
class UnloadPlan:
    """What one unload does with the units it tracks, decided before its first step.

    Attributes:
        hand_over: the unit names left running for the next sdexec (a frozenset).
        stop: the unit names still loaded and not kept: stopped, then seen gone (a tuple).
        stop_timers: unit name to (stop timer seconds, signal), of every process with one.
        answer_waits: the unload answers the parked waits of the units kept (ENOSYS).
        guard_after_exit: seconds the guard of the units kept waits after the broker exits.
        stops_all: the instance ends, or the policy says so: no unit is kept.
        broker_state: the broker's state the plan was made in (the unload's log names it).
    """

    hand_over: frozenset
    stop: tuple
    stop_timers: dict
    answer_waits: bool
    guard_after_exit: float
    stops_all: bool
    broker_state: object = None

    def guarded_timers(self):
        """The stop timers of the units kept: the guard's environment carries them."""
        return {unit: self.stop_timers[unit] for unit in self.hand_over if unit in self.stop_timers}

    def stop_signals(self):
        """Unit name to the signal its main process gets when it lingers at unload."""
        return {unit: signum for unit, (_, signum) in self.stop_timers.items()}


def plan_unload(
    procs,
    policy,
    broker_state,
    held=frozenset(),
    jobs_outlive_shutdown=False,
    restart_grace=DEFAULT_RESTART_GRACE,
):
    """The UnloadPlan of ``procs`` (SdProcs) for this unload.

    Units are kept only when the instance stays: the policy is KEEP_WAITABLE, and the broker
    runs on or its running jobs outlive the shutdown. The waits of the units kept are
    answered, except at a shutdown the running jobs outlive: there the waiter, job-exec, goes
    with the same shutdown, and a failed wait would end the job it hands over
    (events.Unloading). The guard waits no time after the broker's exit when sdexec alone
    was unloaded (the broker's exit then means the instance ended), else the restart grace.

    Args:
        procs: the processes tracked.
        policy: ``[systemd] sdexec-unload``, one of POLICIES.
        broker_state: the local broker's state-machine state, or None when unknown.
        held: the units sdexec keeps loaded (systemd/holds.py).
        jobs_outlive_shutdown: the broker runs with ``FLUX_DISABLE_JOB_CLEANUP``.
        restart_grace: ``[sdexec] restart-grace``, in seconds.
    """
    procs = list(procs)
    broker_runs = broker_state == RUN_STATE
    stays = policy == KEEP_WAITABLE and (broker_runs or jobs_outlive_shutdown)
    hand_over = frozenset(p.unit.name for p in procs if stays and can_hand_over(p, held))
    return UnloadPlan(
        hand_over=hand_over,
        stop=tuple(p.unit.name for p in procs if not p.unit.gone and p.unit.name not in hand_over),
        stop_timers={
            p.unit.name: (p.cmd.stop_timer_sec, p.cmd.stop_signal)
            for p in procs
            if p.cmd.stop_timer_sec is not None
        },
        answer_waits=broker_runs or not jobs_outlive_shutdown,
        guard_after_exit=0 if broker_runs else restart_grace,
        stops_all=not stays,
        broker_state=broker_state,
    )


STOP_TIMERS_ENV = "SDEXEC_STOP_TIMERS"
IMP_STOP_TIMER_SEC = 30  # an adopted IMP's stop timer, its own unknown (a crash)
GUARD_GRACE = 2  # seconds the guard gives each step of its stop (teardown.UNLOAD_GRACE)

# Run by the guard unit: wait for the broker to exit, then for the restart grace (0 but at a
# shutdown the jobs outlive), then stop what was handed over as the unload does: StopUnit,
# after a grace each unit's stop signal on its main process, after another SIGKILL on all its
# processes, then reset what failed. The next sdexec stops the guard once it tracks the
# units. No "${" in it: systemd expands ${NAME} in ExecStart itself (an unknown name to
# nothing).
_GUARD_SCRIPT = (
    'pid=$1; grace=$2; after=$3; shift 3; while kill -0 "$pid" 2>/dev/null; do sleep 1; done; '
    'sleep "$after"; '
    'up() { test -n "$(systemctl --user list-units --plain --no-legend '
    '--state=activating,active,deactivating,reloading "$@")"; }; '
    'settle() { n=0; while test $n -lt $((grace * 5)) && up "$@"; do '
    "sleep 0.2; n=$((n + 1)); done; }; "
    'systemctl --user stop --no-block "$@"; settle "$@"; '
    'for t in $SDEXEC_STOP_TIMERS; do u=$(echo "$t" | cut -d= -f1); '
    's=$(echo "$t" | cut -d= -f2 | cut -d: -f1); '
    'systemctl --user kill --kill-whom=main --signal="$s" "$u" 2>/dev/null; '
    'done; test -n "$SDEXEC_STOP_TIMERS" && settle "$@"; '
    'systemctl --user kill --signal=SIGKILL "$@" 2>/dev/null; settle "$@"; '
    'systemctl --user reset-failed "$@" 2>/dev/null; exit 0'
)


def guard_unit(instance, rank):
    """The name of the unit that guards this rank's handed-over units.

    Outside every ``*:<instance>.service`` glob (no ``:``), so that no sdexec
    mistakes it for a process of its own.
    """
    return f"sdexec-guard-{rank}-{instance.replace(':', '_')}.service"


def guard_command(broker_pid, units, after_exit=0):
    """argv of the guard: if the broker ``broker_pid`` exits and no other sdexec took
    ``units`` over (and stopped the guard) within ``after_exit`` seconds, stop them, so
    nothing outlives the instance even when sdexec is removed for good while it runs."""
    pid, grace, after = str(broker_pid), str(GUARD_GRACE), str(int(after_exit))
    return ["/bin/sh", "-c", _GUARD_SCRIPT, "sdexec-guard", pid, grace, after, *sorted(units)]


def stop_timers_env(timers):
    """The guard's ``SDEXEC_STOP_TIMERS=unit=signal:sec ...`` for ``timers`` (unit name to
    (stop timer seconds, signal))."""
    specs = (f"{unit}={int(signum)}:{sec}" for unit, (sec, signum) in sorted(timers.items()))
    return f"{STOP_TIMERS_ENV}={' '.join(specs)}"


def parse_stop_timers(environment):
    """The timers of a guard's environment (``K=V`` strings); what does not parse is left."""
    timers = {}
    for entry in environment:
        key, _, value = entry.partition("=")
        if key != STOP_TIMERS_ENV:
            continue
        for spec in value.split():
            unit, _, timer = spec.partition("=")
            signum, _, sec = timer.partition(":")
            if unit and signum.isdigit() and sec.isdigit():
                timers[unit] = (int(sec), int(signum))
    return timers


def adopted_stop_timer(unit, argv, handed):
    """(stop timer seconds, signal) of a unit adopted at load: as handed over, else the
    IMP's, else none (None, SIGKILL: the default of an exec without the options)."""
    if unit in handed:
        return handed[unit]
    if runs_imp(argv):
        return IMP_STOP_TIMER_SEC, signal.SIGUSR1
    return None, signal.SIGKILL
