"""The sdexec service on one flux handle: the SdProcs, and the one way into them.

``feed(p, input)`` runs the state machine and carries out the actions it
returns; everything that happens to a process (a systemd signal, an EOF, a
timer, a request) goes through it. The parts around it: ``bus.BusWatcher``
(signals in), ``actions.ActionRunner`` (orders out), ``adopt`` (leftover units
at load), ``catchup`` (every unit again after a reconnect), ``requests.Requests``
(the RPCs), ``mapper_client`` (containment lookups before a start), ``teardown`` (unload).
"""

import errno
import json
import os

from flux_sdexec.core import handoff, orphans, settle, unitstate
from flux_sdexec.broker import adopt, containment_check, introspect
from flux_sdexec.broker.actions import ActionRunner
from flux_sdexec.broker.after_release import Releases, StartsAfterRelease
from flux_sdexec.broker.catchup import CatchUp
from flux_sdexec.broker.mapper_client import MapperLookups
from flux_sdexec.broker.memo import JobMemos
from flux_sdexec.broker.orphan_watch import OrphanWatch
from flux_sdexec.broker.messages import Responder, is_local, sender_of
from flux_sdexec.broker.outbox import Outbox
from flux_sdexec.systemd import guard, teardown
from flux_sdexec.systemd.holds import Holds
from flux_sdexec.systemd.keepers import Keepers
from flux_sdexec.systemd.bridge import SystemdBridge
from flux_sdexec.systemd.bus import BusWatcher
from flux_sdexec.systemd.calls import Calls
from flux_sdexec.systemd.sweeper import Sweeper
from flux_sdexec.broker.accounting import Accounting
from flux_sdexec.broker.watchers import Watchers
from flux_sdexec.core.errors import RequestError, UnitError
from flux_sdexec.core.events import (
    KillUnit,
    ResetFailedUnit,
    StopUnit,
    UnitChanged,
    UnitLost,
    Unloading,
)
from flux_sdexec.core.lifecycle import UNLOADING_TEXT
from flux_sdexec.core.machine import fail, handle
from flux_sdexec.core.registry import Registry
from flux_sdexec.core.states import ProcState

REMOTE_TEXT = "Remote sdexec requests are not allowed on rank 0"
# orders to systemd go out before the rest of a batch: they start the longest waits, and
# nothing a client sees depends on it (their effects come back through later signals)
SYSTEMD_CALLS = (StopUnit, ResetFailedUnit, KillUnit)


class SdexecService:
    """All of sdexec's state on one broker rank.

    Args:
        handle: the module's flux handle.
        log: the module's BrokerLogger.
        rank: this broker's rank.
        local_uri: the broker's ``local-uri`` (FLUX_URI of every unit).
        namer: a ``naming.UnitNamer``.
        debug: ``[systemd] sdexec-debug``.
        unload_policy: ``[systemd] sdexec-unload``.
        containment_check: ``[sdexec] containment-check``.
        containment_required: ``[sdexec] containment-required``.
        broker_pid: the broker's pid, watched by the guard of handed-over units.
        module_file: the module file loaded (stats-get says which).
        systemd_timeout: ``[sdexec] systemd-timeout``, the budget of a systemd call.
        orphan_interval: ``[sdexec] orphan-check-interval`` (broker/orphan_watch.py).
        jobs_outlive_shutdown: the broker runs with ``FLUX_DISABLE_JOB_CLEANUP`` (handoff.py).
        restart_grace: ``[sdexec] restart-grace`` (handoff.py).
    """

    def __init__(
        self,
        handle,
        log,
        rank,
        local_uri,
        namer,
        debug=False,
        unload_policy=handoff.KEEP_WAITABLE,
        containment_check="enforce",
        containment_required=(),
        broker_pid=None,
        module_file=None,
        systemd_timeout=settle.DEFAULT_BUDGET,
        orphan_interval=orphans.DEFAULT_INTERVAL,
        jobs_outlive_shutdown=False,
        restart_grace=handoff.DEFAULT_RESTART_GRACE,
    ):
        self.h = handle
        self.log = log
        self.rank = rank
        self.local_uri = local_uri
        self.namer = namer
        self.debug = debug
        self.unload_policy = unload_policy
        self.jobs_outlive_shutdown = jobs_outlive_shutdown
        self.restart_grace = restart_grace
        self.broker_pid = broker_pid
        self.module_file = module_file
        self.guard = handoff.guard_unit(namer.instance, rank)
        self.registry = Registry()
        self.watchers = Watchers(handle, log)
        self.memos = JobMemos(handle, log, self.watchers)
        self.containment = containment_check.ContainmentChecker(
            log, containment_check, containment_required, memo=self.memos.not_enforced
        )
        self.responder = Responder(handle, log, Outbox(handle, log, self.watchers))
        self.runner = ActionRunner(self)
        # several brokers on one manager: the bus, which filters signals by unit
        self.bridge = SystemdBridge(self._unit_changed, unitstate.TRACKED, shared=namer.rank_suffix)
        self.bridge.open()
        self.bus = BusWatcher(self.bridge, self.watchers, log, lambda: self.catch_up.catch_up())
        self.calls = Calls(self.bridge, self.bus, self.watchers, log, systemd_timeout)
        self.catch_up = CatchUp(
            self.bridge,
            self.registry,
            self.calls,
            self.feed,
            self._lost,
            log,
            lambda: self.calls.deadline,
        )
        self.sweeper = Sweeper(
            self.bridge, self.bus, self.watchers, log, lambda: self.calls.deadline
        )
        self.accounting = Accounting(
            handle, log, rank, self.registry, self.responder, self.bridge, self.sweeper
        )
        self.lookups = MapperLookups(
            handle,
            log,
            rank,
            self.serve,
            self.responder.respond_error,
            sender_of,
            lambda: self.debug,
        )
        self.after_release = StartsAfterRelease(self.serve, self.responder.respond_error, sender_of)
        self.listings = introspect.UnitListings(self)  # sdexec.units, answered from systemd
        self.orphans = OrphanWatch(self, orphan_interval)
        # waitable units stay loaded once ended (holds.py), notify ones through a bus loss
        # (keepers.py); a start of a name whose hold and keeper are not both released yet
        # waits for them (after_release.py)
        self.releases = Releases(self.after_release.gone)
        self.holds = Holds(log, self.watchers, on_released=self.releases.hold_over)
        self.keepers = Keepers(
            self.bridge,
            self.bus,
            self.watchers,
            self.sweeper,
            log,
            lambda: self.calls.deadline,
            self.releases.keeper_over,
        )
        self.releases.holds, self.releases.keepers = self.holds, self.keepers
        self.adopted = adopt.adopt_leftovers(self)  # how many, at load (stats-get)
        guard.stop(self.bridge, self.log, self.guard)  # after: it holds units that ended
        self.bus.pump()

    def feed(self, p, event, pump=False):
        """Apply one input to SdProc ``p`` and carry out the actions, each on its own."""
        try:
            actions = handle(p, event)
        except Exception as exc:  # a bug in the core: nothing was changed; fail the process
            actions = fail(p, f"{type(event).__name__}: {exc!r}")
        self.accounting.reached(p)  # its slice read at the exit, before the answers go out
        if len(actions) > 1:
            actions.sort(key=lambda a: not isinstance(a, SYSTEMD_CALLS))
        for action in actions:
            try:
                self.runner.run(p, action)
            except Exception as exc:
                self.log.error(f"{p.unit.name}: {type(action).__name__}: {exc!r}")
        if p.state is not ProcState.STARTING:
            self.calls.started(p.unit.name)
            if p.cmd.waitable and not p.unit.gone:
                self.holds.hold(p.unit.name)  # loaded with its status once ended (holds.py)
            if p.state is ProcState.DONE:
                self.registry.remove(p)
                self.releases.release(p.unit.name, p.keeper)  # then after_release.gone
        if pump:
            self.bus.pump()

    def _unit_changed(self, unit, props):
        p = self.registry.by_unit(unit)
        if p is None:
            return
        if self.debug:
            state = f"{props.get('ActiveState', '-')}.{props.get('SubState', '-')}"
            self.log.debug(f"{unit}: {state} {json.dumps(props, default=str)[:200]}")
        self.feed(p, UnitChanged(props))

    def _lost(self, p):
        """A started unit the manager does not have after a reconnect (it restarted): its
        processes, outside any manager now, get the unit's stop signal (a job shell's IMP
        kills the whole job on SIGUSR1), and the exec ends with the error saying so."""
        text = f"the systemd manager restarted without {p.unit.name}"
        if containment_check.pid_in_unit(p.pid, p.unit.name):
            try:
                os.kill(p.pid, p.cmd.stop_signal)
                text += f": its processes were sent signal {p.cmd.stop_signal}"
            except OSError as exc:
                self.log.error(f"{p.unit.name}: signal {p.cmd.stop_signal} to {p.pid}: {exc}")
        self.log.error(f"{p.unit.name}: unknown to systemd after the reconnect: {text}")
        self.feed(p, UnitLost(text))
        for props in unitstate.lost_signals(p.pid):
            self._unit_changed(p.unit.name, props)

    def serve(self, msg, verb, func, remote_ok=False):
        """Run ``func(msg)`` for a request, turning any failure into one error response."""
        try:
            if not remote_ok and self.rank == 0 and not is_local(msg):
                raise RequestError(errno.EPERM, REMOTE_TEXT)
            func(msg)
        except OSError as exc:
            self.responder.respond_error(msg, exc.errno or errno.EINVAL, exc.strerror or str(exc))
        except Exception as exc:
            self.log.error(f"{verb}: {exc!r}")
            self.responder.respond_error(msg, errno.EINVAL, f"{verb}: internal error: {exc}")
        self.bus.pump()

    def find(self, pid, label, verb):
        """The visible process with ``label`` (else ``pid``), or RequestError(ESRCH)."""
        p = self.registry.find(pid, label)
        if p is None:
            target = f"label={label}" if label is not None else f"pid={pid}"
            raise RequestError(errno.ESRCH, f"{verb} {target} not found")
        return p

    def unload(self, broker_state):
        """Answer what is owed with ENOSYS and stop every unit still running, except
        those handed over to the next sdexec (``handoff.units_to_keep``).

        Args:
            broker_state: the local broker's state-machine state, None when unknown.
        """
        outlive = self.jobs_outlive_shutdown
        keep = handoff.units_to_keep(
            self.registry, self.unload_policy, broker_state, self.holds.held, outlive
        )
        slices = self.accounting.slices(p for p in self.registry if p.unit.name in keep)
        stays = handoff.instance_stays(self.unload_policy, broker_state, outlive)
        answer_waits = handoff.answers_waits(broker_state, outlive)
        if not stays and len(self.registry):
            self.log.info(
                f"unload ({self.unload_policy}, broker state {broker_state}): stopping every unit"
            )
        self.lookups.cancel_all(errno.ENOSYS, UNLOADING_TEXT)
        self.after_release.cancel_all(errno.ENOSYS, UNLOADING_TEXT)
        self.listings.close(errno.ENOSYS, UNLOADING_TEXT)
        self.orphans.close()
        self.memos.close()
        units = [p.unit.name for p in self.registry if not p.unit.gone and p.unit.name not in keep]
        timers = {
            p.unit.name: (p.cmd.stop_timer_sec, p.cmd.stop_signal)
            for p in self.registry
            if p.cmd.stop_timer_sec is not None
        }
        signals = {unit: signum for unit, (_, signum) in timers.items()}
        self.calls.close(errno.ENOSYS, UNLOADING_TEXT)  # unsettled starts go to the sweeper
        self.holds.hand_over()
        self.keepers.hand_over(keep)
        for p in self.registry:
            self.feed(p, Unloading(keep=p.unit.name in keep, answer_wait=answer_waits))
        try:
            if teardown.ensure_connected(self.bridge, self.log):
                for unit in units:  # the stops just sent were lost with the connection
                    teardown.let_go(self.bridge, self.log, unit, "active", mode="replace")
            swept = self.sweeper.close()
            for unit in swept:
                teardown.let_go(self.bridge, self.log, unit, "active", mode="replace")
            left = [u for u in swept if u not in units]
            if keep and self.broker_pid is not None:
                kept = {unit: timers[unit] for unit in keep if unit in timers}
                after = handoff.guard_after_exit(broker_state, self.restart_grace)
                if after:
                    self.log.info(
                        f"unload (broker state {broker_state}, running jobs outlive it):"
                        f" {len(keep)} job shell(s) kept for {after:g} s after the broker exits"
                    )
                guard.start(
                    self.bridge, self.log, self.guard, self.broker_pid, keep | slices, kept, after
                )
            self.holds.close()  # the guard, loaded, refers to the units kept
            teardown.see_units_gone(self.bridge, self.log, units + left, stop_signals=signals)
        except UnitError as exc:
            self.log.error(f"unload: {exc}")
        self.holds.close()
        teardown.await_replies(self.bridge, self.log)  # the stops of slices, keepers
        # a stop refused or not answered by now reaches the sweeper, closed: one more stop
        self.bridge.fail_pending(UnitError(errno.ETIMEDOUT, "systemd did not answer by unload"))
        late = self.sweeper.close()
        if late:
            teardown.stop_again(self.bridge, self.log, late)
        self.keepers.close()
        self.bridge.close()
        self.accounting.flush()  # waits held for a usage lookup the reactor will not answer
        self.responder.outbox.close()
        self.accounting.close()
