"""Carrying out the core's actions for one SdProc on the flux handle and systemd.

One method per action type, found through a dict: an action without one is a
bug and raises. Actions that ask to hear back (DrainOutput, CheckContainment)
feed their answer to the state machine through the service's ``feed``.
"""

import errno

from flux_sdexec.core import responses
from flux_sdexec.core.errors import UnitError
from flux_sdexec.core.events import (
    ContainmentChecked,
    AnswerWait,
    ArmGrace,
    ArmTimer,
    CancelTimer,
    CheckContainment,
    CloseChannels,
    DrainOutput,
    DrainRank,
    FindSlices,
    GraceExpired,
    KillUnit,
    Log,
    OutputDrained,
    ReadUsage,
    Reap,
    ResetFailedUnit,
    Respond,
    RespondError,
    StartOutput,
    StopSlice,
    StopTimerExpired,
    StopUnit,
    WatchJob,
)


class ActionRunner:
    """Args:
    h: the module's flux handle (resource.drain).
    log: the module's BrokerLogger.
    rank: this broker's rank.
    settings: the service's ``Settings`` (``debug``).
    responder: a ``messages.Responder``.
    systemd: the ``SystemdPort`` the orders go through.
    watchers: a ``watchers.Watchers`` (the stop and grace timers).
    containment: the ``ContainmentChecker``.
    accounting: the ``Accounting`` (the usage actions; a wait's answer waits for the usage
        record).
    feed: ``feed(p, input, pump=False)``, the way into the state machine.
    watch_job: ``watch_job(p)``, the orphan watch's ``consider`` (WatchJob).
    """

    def __init__(
        self, h, log, rank, settings, responder, systemd, watchers, containment, accounting,
        feed, watch_job,
    ):  # fmt: skip
        self._h, self._log, self._rank, self._settings = h, log, rank, settings
        self._responder, self._watchers = responder, watchers
        self._bridge, self._bus = systemd.bridge, systemd.bus
        self._calls, self._sweeper = systemd.calls, systemd.sweeper
        self._containment, self._accounting, self._feed = containment, accounting, feed
        self._watch_job = watch_job
        self._drains = set()  # resource.drain futures not answered yet
        self._dispatch = {
            Respond: self.respond,
            RespondError: self.respond_error,
            AnswerWait: self.answer_wait,
            CheckContainment: self.check_containment,
            StartOutput: self.start_output,
            DrainOutput: self.drain_output,
            CloseChannels: self.close_channels,
            StopUnit: self.stop_unit,
            ResetFailedUnit: self.reset_failed_unit,
            KillUnit: self.kill_unit,
            ArmTimer: self.arm_timer,
            ArmGrace: self.arm_grace,
            CancelTimer: self.cancel_timer,
            Log: self.log,
            FindSlices: lambda p, a: self._accounting.find_slices(p),
            ReadUsage: lambda p, a: self._accounting.read_usage(p),
            StopSlice: lambda p, a: self._accounting.done(p),
            Reap: self.reap,
            DrainRank: self.drain_rank,
            WatchJob: lambda p, a: self._watch_job(p),
        }

    def run(self, p, action):
        """Carry out ``action`` for SdProc ``p``."""
        try:
            method = self._dispatch[type(action)]
        except KeyError:
            raise TypeError(f"no adapter for action {action!r}") from None
        method(p, action)

    # a job shell's last responses wait, in order, for its usage to be handed on
    # (usage/accounting.py): its job's memo is posted before job-exec hears of its end
    def respond(self, p, a):
        msg = p.exec_request.msg
        self._accounting.after_usage(p, lambda usage: self._responder.respond(msg, a.payload))

    def respond_error(self, p, a):
        msg = p.exec_request.msg
        self._accounting.after_usage(
            p, lambda usage: self._responder.respond_error(msg, a.errnum, a.text)
        )

    def answer_wait(self, p, a):
        if a.error is not None:
            self._responder.respond_error(a.waiter.msg, *a.error)
            return
        result = responses.wait_result(a.status, list(a.output))

        def send(usage):
            if usage is not None:
                result["usage"] = usage  # flux-core's clients read status and output only
            self._responder.respond(a.waiter.msg, result)

        # an adopted job shell's usage is its job's record, looked up first (usage/accounting.py)
        self._accounting.after_usage(p, send)

    def check_containment(self, p, a):
        self._feed(p, ContainmentChecked(self._containment.check(a.pid, a.check, p.unit.name)))

    def start_output(self, p, a):
        for channel in p.outputs:
            if channel.io is not None:
                channel.io.start()

    def drain_output(self, p, a):
        for channel in p.outputs:
            if channel.io is not None:
                channel.io.drain()
        self._feed(p, OutputDrained())

    def close_channels(self, p, a):
        for channel in (p.in_, *p.outputs):
            if channel.io is not None:
                channel.io.close()

    def stop_unit(self, p, a):
        # "replace" cancels a start job still queued, where "fail" is refused
        self.quietly(p, "stop", self._bridge.stop_unit, p.unit.name, mode="replace")

    def reset_failed_unit(self, p, a):
        self.quietly(p, "reset-failed", self._bridge.reset_failed_unit, p.unit.name)

    def kill_unit(self, p, a):
        """KillUnit settled as sdexec.kill's (calls.py): one lost to a reconnect goes again."""
        what = f"kill main (signal {a.signum})"
        if self._settings.debug:
            self._log.debug(f"{what} {p.unit.name}")
        self._calls.kill(p.unit.name, a.signum, self._on_reply(p, what))

    def arm_timer(self, p, a):
        if p.stop.io is None:
            p.stop.io = self._watchers.timer(
                a.seconds, lambda: self._feed(p, StopTimerExpired(), pump=True), p.unit.name
            )
        p.stop.io.reset(after=a.seconds)

    def arm_grace(self, p, a):
        if p.wait.grace is None:
            p.wait.grace = self._watchers.timer(
                a.seconds, lambda: self._feed(p, GraceExpired(), pump=True), p.unit.name
            )
        # it may be running (a grace becoming a hold): libev re-arms only stopped timers
        p.wait.grace.stop()
        p.wait.grace.reset(after=a.seconds)

    def cancel_timer(self, p, a):
        if p.stop.io is not None:
            p.stop.io.stop()

    def log(self, p, a):
        self._log(a.level, a.text)

    def drain_rank(self, p, a):
        """resource.drain of this rank on rank 0, as job-exec drains ranks; a failure is
        logged."""
        payload = {"targets": str(self._rank), "reason": a.reason, "mode": "update"}
        self._log.error(f"draining rank {self._rank}: {a.reason}")

        def answered(future):
            self._drains.discard(future)
            try:
                future.get()
            except OSError as exc:
                self._log.error(f"resource.drain of rank {self._rank}: {exc.strerror or exc}")

        future = self._h.rpc("resource.drain", payload, 0)
        self._drains.add(future)  # referenced until answered
        future.then(self._watchers.shield(answered, "resource.drain"))

    def reap(self, p, a):
        """Release the unit watch, the timers and the channels."""
        self._bridge.unwatch(p.unit.name)
        if p.stop.io is not None:
            p.stop.io.stop()
            p.stop.io.destroy()
            p.stop.io = None
        if p.wait.grace is not None:
            p.wait.grace.stop()
            p.wait.grace.destroy()
            p.wait.grace = None
        self.close_channels(p, a)

    def quietly(self, p, what, call, *args, **kwargs):
        """Send a call that makes systemd forget ``p``'s unit without waiting: one refused,
        lost or not answered hands the unit to the sweeper (sweeper.py), which logs it."""
        if self._settings.debug:
            self._log.debug(f"{what} {p.unit.name}")
        on_reply = self._on_reply(p, what, sweep=True)
        try:
            call(*args, on_reply=on_reply, timeout=self._calls.deadline(), **kwargs)
        except UnitError as exc:
            on_reply(exc)
        self._bus.sent()

    def _on_reply(self, p, what, sweep=False):
        """The reply handler of a call for ``p``: its error is logged, at debug level when
        the unit is gone, has nothing to act on, or the module unloads (which stops it)."""

        def on_reply(exc):
            if exc is not None:
                quiet = p.unit.gone or exc.errno in (errno.ENOENT, errno.ESRCH, errno.ENOSYS)
                if quiet:
                    self._log.debug(f"{what} {p.unit.name}: {exc}")
                elif sweep:  # the sweeper logs it, and sees the unit gone
                    self._sweeper.sweep(p.unit.name, f"{what}: {exc}")
                else:
                    self._log.error(f"{what} {p.unit.name}: {exc}")

        return on_reply
