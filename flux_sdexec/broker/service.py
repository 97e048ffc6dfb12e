"""The sdexec service on one flux handle: the composition root, and the one way in.

``SdexecService`` builds every part and wires them: each part takes in its constructor
what it uses, and nothing else holds the service. ``feed(p, input)`` runs the state
machine and carries out the actions it returns; everything that happens to a process (a
systemd signal, an EOF, a timer, a request) goes through it. The parts: ``bus.BusWatcher``
(signals in), ``actions.ActionRunner`` (orders out), ``adopt`` (leftover units at load),
``catchup`` (every unit again after a reconnect), ``requests.Requests`` (the RPCs),
``mapper_client`` (containment lookups before a start). ``unload`` is the one place that
orders the end.
"""

import errno
import json
import os
import socket

from flux_sdexec import __version__
from flux_sdexec.config import Config, Settings
from flux_sdexec.core import handoff, unitstate
from flux_sdexec.broker import adopt, introspect
from flux_sdexec.broker.containment_check import ContainmentChecker, pid_in_unit
from flux_sdexec.broker.requests import Requests
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
from flux_sdexec.systemd.port import SystemdPort
from flux_sdexec.systemd.sweeper import Sweeper
from flux_sdexec.usage.job_usage import JobUsage
from flux_sdexec.usage.accounting import Accounting
from flux_sdexec.broker.watchers import Watchers
from flux_sdexec.core.errors import RequestError, UnitError
from flux_sdexec.core.events import (
    KillUnit,
    ReadUsage,
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


def _order(action):
    """Where ``action`` goes among one input's: the usage read at the exit first (before
    the systemd calls and the answers), then the systemd calls, then the rest, each group in
    the machine's order."""
    if isinstance(action, ReadUsage):
        return 0
    return 1 if isinstance(action, SYSTEMD_CALLS) else 2


class SdexecService:
    """All of sdexec's state on one broker rank.

    Args:
        handle: the module's flux handle.
        log: the module's BrokerLogger.
        rank: this broker's rank.
        local_uri: the broker's ``local-uri`` (FLUX_URI of every unit).
        namer: a ``naming.UnitNamer``.
        config: the instance's ``config.Config`` (``reconfigure`` takes a new one).
        broker_pid: the broker's pid, watched by the guard of handed-over units.
        module_file: the module file loaded (stats-get says which).
        jobs_outlive_shutdown: the broker runs with ``FLUX_DISABLE_JOB_CLEANUP`` (handoff.py).
        bridge_class: what reaches systemd (``SystemdBridge``; tests give a fake).
    """

    def __init__(
        self,
        handle,
        log,
        rank,
        local_uri,
        namer,
        config=Config(),
        broker_pid=None,
        module_file=None,
        jobs_outlive_shutdown=False,
        bridge_class=SystemdBridge,
    ):
        self.log = log
        self.rank = rank
        self.settings = Settings()
        self.settings.take(config)
        self.jobs_outlive_shutdown = jobs_outlive_shutdown
        self.broker_pid = broker_pid
        self.module_file = module_file
        self.guard = handoff.guard_unit(namer.instance, rank)
        self.registry = registry = Registry()
        self.watchers = watchers = Watchers(handle, log)
        self.memos = JobMemos(handle, log, watchers)
        self.containment = ContainmentChecker(
            log, config.containment_check, config.containment_required,
            memo=self.memos.not_enforced,
        )  # fmt: skip
        self.responder = responder = Responder(Outbox(handle, log, watchers))
        # systemd: several brokers on one manager take their signals through the bus,
        # which filters them by unit
        self.bridge = bridge = bridge_class(
            self._unit_changed, unitstate.TRACKED, shared=namer.rank_suffix
        )
        bridge.open()
        self.bus = bus = BusWatcher(bridge, watchers, log, lambda: self.catch_up.catch_up())
        self.calls = calls = Calls(bridge, bus, watchers, log, config.systemd_timeout)
        self.catch_up = CatchUp(bridge, registry, calls, self.feed, self._lost, log, calls.deadline)
        self.sweeper = sweeper = Sweeper(bridge, bus, watchers, log, calls.deadline)
        host = socket.gethostname()
        self.job_usage = jobs = JobUsage(handle, log, rank, host, watchers, self.memos, registry)
        self.accounting = Accounting(
            log, rank, host, self.settings, registry, bridge, sweeper, jobs,
            sent=bus.sent, deadline=calls.deadline,
        )  # fmt: skip
        # waitable units stay loaded once ended (holds.py), notify ones through a bus loss
        # (keepers.py); a start of a name whose hold and keeper are not both released yet
        # waits for them (after_release.py)
        self.after_release = StartsAfterRelease(self.serve, responder.respond_error, sender_of)
        self.releases = releases = Releases(self.after_release.released)
        self.holds = Holds(log, watchers, on_released=releases.hold_released)
        self.keepers = Keepers(
            bridge, bus, watchers, sweeper, log, calls.deadline, releases.keeper_released
        )
        releases.holds, releases.keepers = self.holds, self.keepers
        systemd = SystemdPort(bridge, bus, calls, sweeper, self.keepers)
        self.runner = ActionRunner(
            handle, log, rank, self.settings, responder, systemd, watchers, self.containment,
            self.accounting, self.feed, lambda p: self.orphans.consider(p),
        )  # fmt: skip
        # flux: the mapper's lookups, the job queries of suspect shells, the requests
        self.lookups = MapperLookups(
            handle, log, rank, self.serve, responder.respond_error, sender_of,
            lambda: self.settings.debug,
        )  # fmt: skip
        self.orphans = OrphanWatch(
            handle, log, watchers, registry, self.feed, config.orphan_interval
        )
        self.listings = introspect.UnitListings(
            rank, registry, namer, self.orphans.job_seen, bridge, bus, calls, responder
        )
        self.requests = Requests(
            log=log, rank=rank, settings=self.settings, local_uri=local_uri, namer=namer,
            registry=registry, feed=self.feed, responder=responder, systemd=systemd,
            watchers=watchers, releases=releases, after_release=self.after_release,
            lookups=self.lookups, listings=self.listings, orphans=self.orphans,
            accounting=self.accounting, job_usage=self.job_usage, stats=self.stats,
        )  # fmt: skip
        # the units an earlier sdexec left, then the guard that held them goes
        self.adopted = adopt.adopt_leftovers(
            log=log, namer=namer, registry=registry, feed=self.feed, systemd=systemd,
            catch_up=self.catch_up, holds=self.holds, accounting=self.accounting,
            orphans=self.orphans, guard_unit=self.guard,
        )  # fmt: skip
        guard.stop(bridge, log, self.guard)  # after: it holds units that ended
        bus.pump()

    def feed(self, p, event, pump=False):
        """Apply one input to SdProc ``p`` and carry out the actions, each on its own."""
        try:
            actions = handle(p, event)
        except Exception as exc:  # a bug in the core: nothing was changed; fail the process
            actions = fail(p, f"{type(event).__name__}: {exc!r}")
        if len(actions) > 1:
            actions.sort(key=_order)
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
                keeper = self.keepers.pop(p.unit.name)
                self.releases.release(p.unit.name, keeper)  # then after_release.released
        if pump:
            self.bus.pump()

    def _unit_changed(self, unit, props):
        p = self.registry.by_unit(unit)
        if p is None:
            return
        if self.settings.debug:
            state = f"{props.get('ActiveState', '-')}.{props.get('SubState', '-')}"
            self.log.debug(f"{unit}: {state} {json.dumps(props, default=str)[:200]}")
        self.feed(p, UnitChanged(props))

    def _lost(self, p):
        """A started unit the manager does not have after a reconnect (it restarted): its
        processes, outside any manager now, get the unit's stop signal (a job shell's IMP
        kills the whole job on SIGUSR1), and the exec ends with the error saying so."""
        text = f"the systemd manager restarted without {p.unit.name}"
        if pid_in_unit(p.pid, p.unit.name):
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

    def reconfigure(self, conf):
        """``config-reload``: every key checked (RequestError) before any is applied."""
        config = Config.parse(conf)
        self.settings.take(config)
        # the host's set read again
        self.containment.configure(config.containment_check, config.containment_required)
        self.calls.budget = config.systemd_timeout
        self.orphans.interval = config.orphan_interval

    def stats(self):
        """``sdexec.stats-get``: flux-core's per-unit ``procs`` plus our module's own facts."""
        return {
            "procs": introspect.procs_stats(self.registry),
            "version": __version__,
            "module": self.module_file,
            "systemd": introspect.systemd_link(self.bridge.via),
            "reconnects": self.bus.reconnects,
            "signals": self.bridge.signals.stats(),
            "tracked": introspect.tracked_counts(self.registry),
            "adopted": self.adopted,
            "containment": self.containment.stats(),
            "systemd-timeout": self.calls.budget,
            "sweeping": self.sweeper.units(),
            "orphan-checks": self.orphans.checks,
            "orphans-stopped": self.orphans.stopped,
            "usage-gather": self.job_usage.stats(),
            "usage-source": self.accounting.source.stats(),
        }

    def unload(self, broker_state):
        """Answer what is owed with ENOSYS and stop every unit still running, except
        those handed over to the next sdexec. What goes and what stays is decided once
        (``handoff.plan_unload``), then carried out in order; each step says why it comes
        where it does.

        Args:
            broker_state: the local broker's state-machine state, None when unknown.
        """
        plan = handoff.plan_unload(
            self.registry,
            self.settings.unload_policy,
            broker_state,
            held=self.holds.held,
            jobs_outlive_shutdown=self.jobs_outlive_shutdown,
            restart_grace=self.settings.restart_grace,
        )
        if plan.stops_all and len(self.registry):
            policy = self.settings.unload_policy
            self.log.info(
                f"unload ({policy}, broker state {plan.broker_state}): stopping every unit"
            )
        self._refuse_new_work()
        slices = self._hand_over(plan)
        self._stop_and_guard(plan, slices)
        self._close_systemd()
        self._close_flux()

    def _refuse_new_work(self):
        """Unload, first: what waits for a reply of flux's or of a part is answered."""
        for part in (self.lookups, self.after_release, self.listings):
            part.cancel_all(errno.ENOSYS, UNLOADING_TEXT)
        self.orphans.close()
        self.memos.close()

    def _hand_over(self, plan):
        """Unload, second: the slices of the units kept stay with them (returned). Then the
        state machine answers its requests and sends the stops. The references and keepers
        of the units kept stay until the guard holds them."""
        slices = self.accounting.hand_over(
            p for p in self.registry if p.unit.name in plan.hand_over
        )
        self.calls.close(errno.ENOSYS, UNLOADING_TEXT)  # unsettled starts go to the sweeper
        self.holds.hand_over()
        self.keepers.hand_over(plan.hand_over)
        for p in self.registry:
            keep = p.unit.name in plan.hand_over
            self.feed(p, Unloading(hand_over=keep, answer_wait=plan.answer_waits))
        return slices

    def _stop_and_guard(self, plan, slices):
        """Unload, third, blocking from here on (the reactor is done): stop what goes,
        guard what stays, then see what goes gone."""
        try:
            left = self._stop_what_goes(plan)
            self._guard_what_stays(plan, slices)
        except UnitError as exc:
            self.log.error(f"unload: {exc}")
            return
        finally:
            self.holds.close()  # only now: the guard, loaded, refers to the units kept
        units, signals = [*plan.stop, *left], plan.stop_signals()
        try:
            teardown.see_units_gone(self.bridge, self.log, units, stop_signals=signals)
        except UnitError as exc:
            self.log.error(f"unload: {exc}")

    def _close_systemd(self):
        """Unload, fourth: the stops of slices and keepers answered. One refused or not
        answered by now reached the sweeper, closed (or all it had, when the stop failed
        before closing it): one more stop, then the connection goes."""
        teardown.await_replies(self.bridge, self.log)
        self.bridge.fail_pending(UnitError(errno.ETIMEDOUT, "systemd did not answer by unload"))
        late = self.sweeper.take()
        if late:
            teardown.stop_again(self.bridge, self.log, late)
        self.keepers.close()
        self.bridge.close()

    def _close_flux(self):
        """Unload, last: waits held for a usage lookup the reactor will not answer, what the
        gatherings of jobs' usage hold (their waits will not end), then the responses still
        queued."""
        self.accounting.flush()
        self.job_usage.close()
        self.responder.outbox.close()
        self.accounting.close()

    def _stop_what_goes(self, plan):
        """Stop the units of ``plan.stop`` again if the connection was lost meanwhile, then
        close the sweeper and stop the units it still had; returns those not among them."""
        if teardown.ensure_connected(self.bridge, self.log):
            for unit in plan.stop:  # the stops just sent were lost with the connection
                teardown.release_now(self.bridge, self.log, unit, "active", mode="replace")
        swept = self.sweeper.close()
        for unit in swept:
            teardown.release_now(self.bridge, self.log, unit, "active", mode="replace")
        return [unit for unit in swept if unit not in plan.stop]

    def _guard_what_stays(self, plan, slices):
        """Start the guard unit that holds the units kept (and their slices) for the next
        sdexec, with their stop timers (handoff.py)."""
        if not plan.hand_over or self.broker_pid is None:
            return
        after = plan.guard_after_exit
        if after:
            self.log.info(
                f"unload (broker state {plan.broker_state}, running jobs outlive it):"
                f" {len(plan.hand_over)} job shell(s) kept for {after:g} s after the broker exits"
            )
        units, timers = plan.hand_over | slices, plan.guarded_timers()
        guard.start(self.bridge, self.log, self.guard, self.broker_pid, units, timers, after)
