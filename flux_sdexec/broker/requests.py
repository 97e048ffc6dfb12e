"""The sdexec RPCs: each validates its request and feeds the state machine.

``exec`` starts a unit (responses then follow from systemd's signals), ``write``
feeds stdin, ``kill``/``wait``/``list``/``stats-get``/``units`` look processes up,
``usage``/``usage-live`` read what processes used and ``usage-gather`` takes a child
broker's rows of a job, and ``disconnect`` tells the processes of a client that went away.
"""

import dataclasses
import errno
import time

from flux_sdexec.core import properties, protocol, responses, settle
from flux_sdexec.containment import enforcement
from flux_sdexec.broker.channels import InputChannel
from flux_sdexec.broker.messages import (
    Request,
    is_noresponse,
    is_streaming,
    payload_of,
    sender_of,
)
from flux_sdexec.broker.output import OutputReader
from flux_sdexec.systemd import keepers
from flux_sdexec.core.errors import RequestError
from flux_sdexec.core.events import (
    AnswerMaybeLost,
    ClientGone,
    StartFailed,
    WaitRequested,
    WaiterGone,
    ClaimsStart,
    LabelReused,
)
from flux_sdexec.core.sdproc import SdProc
from flux_sdexec.core.states import ProcState
from flux_sdexec.usage.job_usage import LIVE_WAIT_MAX_S, LIVE_WAIT_S


class Requests:
    """The request handlers of one sdexec.

    Args (by keyword; the service wires them):
        log, rank, local_uri, namer: the module's logger, rank, FLUX_URI of every unit and
            ``naming.UnitNamer``.
        settings: the service's ``Settings`` (``debug``).
        registry: the ``Registry`` of SdProcs; feed: ``feed(p, input)`` into the machine.
        responder: a ``messages.Responder``; watchers: a ``watchers.Watchers``.
        systemd: the ``SystemdPort`` a start and a kill go through.
        releases, after_release: a start of a name still being let go waits (after_release).
        lookups: the mapper lookups; listings: ``introspect.UnitListings``.
        orphans: the ``OrphanWatch``; accounting: the ``Accounting`` (a start's slice,
            ``sdexec.usage``); job_usage: the ``JobUsage`` (``usage-live``, ``usage-gather``).
        stats: ``stats()``, the answer of ``sdexec.stats-get``.
    """

    def __init__(
        self, *, log, rank, settings, local_uri, namer, registry, feed, responder, systemd,
        watchers, releases, after_release, lookups, listings, orphans, accounting, job_usage,
        stats,
    ):  # fmt: skip
        self._log, self._rank, self._settings = log, rank, settings
        self._local_uri, self._namer, self._registry, self._feed = local_uri, namer, registry, feed
        self._responder, self._watchers = responder, watchers
        self._bridge, self._bus, self._calls = systemd.bridge, systemd.bus, systemd.calls
        self._sweeper, self._keepers = systemd.sweeper, systemd.keepers
        self._releases, self._after_release, self._lookups = releases, after_release, lookups
        self._listings, self._orphans, self._accounting = listings, orphans, accounting
        self._job_usage, self._stats = job_usage, stats
        self.claims_started = False  # a collecting client came since load (waits.py)

    def exec(self, msg):
        """``sdexec.exec``: validate, map resources if asked, then start the unit."""
        req = protocol.parse_exec(payload_of(msg, "exec"), is_streaming(msg))
        if req.r_local is not None:
            self._lookups.lookup(msg, req, self._start)
        else:
            self._start(msg, req)

    def _start(self, msg, req):
        """Name and start the unit; responses follow from signals. Returns the unit name."""
        if req.label:
            self._take_label(req.label)
        unit = self._namer.name(req.label, req.opts.get("SDEXEC_NAME"))
        old = self._registry.by_unit(unit)
        if old is not None and old.label_free:  # a wait gave its status: it goes
            self._feed(old, LabelReused())
        elif old is not None or self._after_release.has(unit=unit):
            raise RequestError(errno.EEXIST, f"unit {unit} is already in use")
        # the old unit is still loaded, or its hold or keeper not released yet (releases)
        if self._registry.by_unit(unit) is not None or self._releases.pending(unit):
            self._after_release.wait(unit, msg, req.label, lambda m: self._start(m, req))
            return unit
        if unit in self._sweeper:
            raise RequestError(errno.EEXIST, f"unit {unit} is still being stopped")
        check = enforcement.post_start_check(req, self._settings.debug)
        req = dataclasses.replace(req, post_start_check=check)
        p = SdProc(Request(msg), req, unit)
        try:
            channels = self._open_channels(p)
            environment = protocol.unit_environment(req.env, self._local_uri)
            fds = {c.name: c.io.remote_fd() for c in channels}
            props = properties.start_properties(req.cmdline, req.cwd, environment, fds, req.opts)
            props, aux = self._accounting.place(p, props), []
            if self._bridge.signals.over_bus:  # a bus loss would lose its end (keepers.py)
                props, aux, keeper = keepers.with_keeper(unit, props)
                self._keepers.record(unit, keeper)
            self._registry.add(p)
            p.unit.started_at = time.time()
            self._bridge.watch(unit)
            if self._settings.debug:
                self._log.debug(f"start {unit}")
            self._calls.start(
                unit,
                props,
                lambda e: self._start_replied(p, e),
                lambda budget, waited: self._start_late(p, budget, waited),
                aux,
            )
            p.calls.start_sent = True
        except BaseException:
            self._calls.started(unit)  # its budget timer goes too
            self._bridge.unwatch(unit)
            self._keepers.pop(unit)
            self._registry.remove(p)
            for channel in (p.in_, *p.outputs):
                if channel.io is not None:
                    channel.io.close()
            raise
        return unit

    def _find(self, pid, label, verb):
        """The visible process with ``label`` (else ``pid``), or RequestError(ESRCH)."""
        p = self._registry.find(pid, label)
        if p is None:
            target = f"label={label}" if label is not None else f"pid={pid}"
            raise RequestError(errno.ESRCH, f"{verb} {target} not found")
        return p

    def _take_label(self, label):
        """EEXIST if a live process, or a record no wait has collected, has ``label``; a
        record whose status a wait already gave lets it go (waits.py: label_reused)."""
        holder = self._registry.find(-1, label)
        if holder is not None and holder.label_free:
            self._feed(holder, LabelReused())
        elif holder is not None or self._after_release.has(label=label):
            raise RequestError(errno.EEXIST, "command label is not unique")

    def _start_replied(self, p, error):
        """StartTransientUnit settled (calls.py): systemd took it, or refused it, or the
        budget ran out or the module unloads before it settled (the unit may still appear:
        the sweeper sees it gone)."""
        if error is None:
            for channel in (p.in_, *p.outputs):
                if channel.io is not None:
                    channel.io.close_remote()  # kept until now for a repeat of the start
            return
        if error.errno in (errno.ETIMEDOUT, errno.ENOSYS):  # out of budget, or unloading
            self._sweeper.sweep(p.unit.name, f"exec failed: {error.strerror}")
        code = errno.EINVAL if error.errno == errno.EROFS else error.errno  # unknown property
        self._feed(p, StartFailed(code, error.strerror))

    def _start_late(self, p, budget, waited):
        """systemd took the start but the budget ran out before the process ran."""
        if p.state is ProcState.STARTING:
            text = settle.budget_text(budget, waited, p.unit.state, p.unit.left_inactive)
            self._sweeper.sweep(p.unit.name, f"exec failed: {text}")
            self._feed(p, StartFailed(errno.ETIMEDOUT, text))

    def _open_channels(self, p):
        """The socketpairs of the channels ``p`` uses, attached to its Channels."""
        if p.in_.used:
            p.in_.io = InputChannel(self._watchers, self._log, p.logname)
        for channel in p.outputs:
            if channel.used:
                channel.io = OutputReader(
                    self._watchers,
                    self._log,
                    p,
                    channel.name,
                    str(self._rank),
                    self._responder.outbox,
                    self._feed,
                )
        return [c for c in (p.in_, *p.outputs) if c.io is not None]

    def write(self, msg):
        """``sdexec.write``: stdin data for a foreground process; never answered.

        A write to a process that is gone is logged at debug level: the ordinary race of
        ``flux exec`` forwarding stdin EOF after a fast command, not a fault of the service.
        """
        try:
            if not is_noresponse(msg):
                raise RequestError(errno.EPROTO, "write request is missing NORESPONSE flag")
            matchtag, data, eof = protocol.parse_write(payload_of(msg, "write"))
            p = self._registry.by_request(sender_of(msg), matchtag)
            if p is None:
                self._log.debug("sdexec.write: subprocess no longer exists")
                return
            if p.in_.io is None:
                raise RequestError(
                    errno.EINVAL, "sdexec.write: stdin is closed for a background process"
                )
            p.in_.io.write(data, eof)
        except OSError as exc:
            self._log.error(str(exc))
        except Exception as exc:
            self._log.error(f"write: {exc!r}")

    def kill(self, msg):
        """``sdexec.kill``: KillUnit(main, signum) on a tracked process."""
        pid, label, signum = protocol.parse_kill(payload_of(msg, "kill"))
        p = self._find(pid, label, "kill")
        if self._settings.debug:
            self._log.debug(f"kill main {p.unit.name} (signal {signum})")
        self._calls.kill(p.unit.name, signum, lambda e: self._killed(msg, e))

    def _killed(self, msg, error):
        if error is None:
            self._responder.respond(msg)
        else:
            self._responder.respond_error(msg, error.errno, error.strerror)

    def wait(self, msg):
        """``sdexec.wait``: a waitable process's status, now or when it ends. The first one
        since load starts the claim window of adopted records (waits.py)."""
        self.start_claims("a client waits")
        pid, label = protocol.parse_target(payload_of(msg, "wait"), "wait")
        p = self._find(pid, label, "wait")
        if not p.cmd.waitable:
            raise RequestError(errno.EINVAL, "process is not waitable")
        if p.wait.waiter is not None:
            raise RequestError(errno.EINVAL, "process is already being waited on")
        self._feed(p, WaitRequested(Request(msg)))

    def start_claims(self, why):
        """The first time a collecting client is there (the first wait, or the upgrade's
        ``sdexec.job-exec-loaded`` event): the claim window of adopted records starts."""
        if self.claims_started:
            return
        self.claims_started = True
        for p in self._registry:
            if p.adopted:
                self._feed(p, ClaimsStart(why))
        self._bus.pump()

    def list(self, msg):
        """``sdexec.list``: every tracked process, in start order."""
        procs = [
            responses.list_entry(p.pid, p.cmd.cmdline[0], p.cmd.label, p.finished)
            for p in self._registry
            if p.visible
        ]
        self._responder.respond(msg, {"rank": self._rank, "procs": procs})

    def stats(self, msg):
        """``sdexec.stats-get``: per-unit state and channel fds, and the module's own facts."""
        self._responder.respond(msg, self._stats())

    def units(self, msg):
        """``sdexec.units``: the tracked processes (and, asked for, the untracked units)."""
        untracked = protocol.parse_units(payload_of(msg, "units"))
        self._listings.answer(msg, untracked)  # with all: from the listing's reply

    def usage(self, msg):
        """``sdexec.usage {"jobid"?: f58plain}``: the records of this rank's processes with
        a slice (of the job, if given), read now for the running ones."""
        plain = protocol.parse_usage(payload_of(msg, "usage"))
        self._responder.respond(msg, self._accounting.records(plain))

    def usage_live(self, msg):
        """``sdexec.usage-live {"jobid": f58plain, "wait"?: seconds}``: the rows of the job's
        ranks under this broker in the overlay, this rank's read now, the others asked down
        the tree; answered once all are in or ``wait`` (default LIVE_WAIT_S) has passed."""
        body = payload_of(msg, "usage-live")
        plain, wait = protocol.parse_usage_live(body, LIVE_WAIT_S, LIVE_WAIT_MAX_S)

        def send(rows, missing):
            self._responder.respond(msg, responses.usage_rows(rows, missing))

        self._job_usage.gather_live(plain, self._accounting.live_rows(plain), wait, send)

    def usage_gather(self, msg):
        """``sdexec.usage-gather``: a child's usage rows of a job, merged, answered once
        handed on (usage/job_usage.py)."""
        body = payload_of(msg, "usage-gather")
        self._job_usage.received(body, lambda: self._responder.respond(msg, {}))

    def disconnect(self, msg):
        """RFC 6 disconnect: tell the client's processes, the ones it waits on, and the
        ones whose status it was just answered (it may have left with it unread); a job
        shell left with no waiter becomes a suspect orphan (orphans.py)."""
        sender = sender_of(msg)
        registry = self._registry
        self._lookups.cancel(sender)
        self._after_release.cancel(sender)
        for p in registry.by_sender(sender):
            if p.exec_request is not None and p.exec_request.sender == sender:
                self._feed(p, ClientGone())
            if p.wait.waiter is not None and p.wait.waiter.sender == sender:
                self._feed(p, WaiterGone())
            if p.wait.answered_to is not None and p.wait.answered_to.sender == sender:
                self._feed(p, AnswerMaybeLost(registry.label_taken(p)))
            self._orphans.consider(p)  # a job shell nobody waits on: is its job over?
        self._bus.pump()
