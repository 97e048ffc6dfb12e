"""What each unit used, read from its accounting slice or its unit, and handed to its job.

Every job shell sdexec starts (every unit with ``[sdexec] usage = "all"``, none with
``"none"``) gets ``Slice=`` a slice of its own (``usage.cgroup_usage``), unless the client
chose a slice, or, for a job shell, systemd keeps an exited unit's figures (the unit source,
``usage.unit_usage``: learnt from the first unit that exits after load, whose two Gets this
module sends; slices until then). Under the unit source the shell's figures are two Get
calls at its exit, sent before its stop, and its answers wait for their replies (each
bounded by the per-call deadline). When the process is known to have exited, the slice's
cgroup files are read once (5-7 small files: ~50 µs here) into a
``usage.record.UsageRecord``, kept here with the rest of the process's accounting
(``_Account``, written by this module alone): logged at debug level, answered in
``sdexec.wait`` (field ``usage``), and, for a job shell, handed to
``usage.job_usage.JobUsage`` (the job's KVS directory, its ``oom`` exception). The slice is
stopped once the unit is gone. Nothing here blocks or raises into the caller: a failed read
is logged.

A job shell's end is answered (job-exec's wait, bulk-exec's last responses) once its row
is handed on (``JobUsage.shell_ended``): so rank 0 has written the job's record and posted
its memo before job-exec hears that the job's last shell ended, and the job is still active
for the memo. The answers wait in a ``_HandingOn`` (``after_usage``) meanwhile: a round trip
to the parent broker, more where a broker looks the job up first.

A job shell adopted at load may have ended under the sdexec before (a bgexec shell that
ended while job-exec was out for an upgrade, or just before a crash): that sdexec wrote its
record, raised its ``oom`` exception and, at an unload, stopped its slice. Reading the
slice again would give nulls (it is gone) or count the OOM kills a second time. So the
first read of an adopted job shell's exit looks its record up in the job's KVS directory
first, without waiting: there, the record written is the process's usage and nothing is
sent or raised; not there, the figures read at the exit go to the job as for any exec. The
KVS is the one place that survives both an upgrade and a crash, and a record written is
never one this sdexec has to guess. The answers go once the record is known.

Imports no CLI module and nothing of flux.
"""

import errno
import functools
import json
import os
import posixpath
import time
import weakref

from flux_sdexec.containment import cgroups
from flux_sdexec.core.errors import UnitError
from flux_sdexec.core.properties import PREFIX
from flux_sdexec.core.shelljobs import shell_job
from flux_sdexec.usage import cgroup_usage, unit_usage
from flux_sdexec.usage.oom_log import OomLog
from flux_sdexec.usage.unit_usage import SLICE, UNIT, UsageSource

UNKNOWN_PARENT = (
    "where the accounting slices are is not known yet (no unit's process seen alive since load)"
)
UNKNOWN_CGROUP = "the unit's cgroup is not known (its process not seen running)"
DEFAULT_SLICE = "app.slice"  # where a unit runs without a Slice= of its own
KEPT = ("active", "failed")  # a unit in these states is loaded: systemd has its figures


class Accounting:
    """The accounting of one SdexecService's processes.

    Args:
        log: the module's BrokerLogger.
        rank: this broker's rank; host: this node's host name.
        settings: the service's ``config.Settings`` (``usage``: which units get a slice).
        registry: the service's Registry (``records`` reads its processes).
        bridge: the SystemdBridge that stops slices.
        sweeper: the Sweeper: a unit in it is let go; a slice whose stop failed goes to it.
        jobs: the ``usage.job_usage.JobUsage`` a job shell's record goes to.
        proc: the /proc root; kmsg: the kernel log (v1 OOM kills).
        sent: ``sent()`` after a call sent without waiting (arms its deadline: BusWatcher).
        deadline: ``deadline()``, the seconds a call waits for its reply (Calls).
    """

    def __init__(
        self,
        log,
        rank,
        host,
        settings,
        registry,
        bridge,
        sweeper,
        jobs,
        proc="/proc",
        kmsg="/dev/kmsg",
        sent=lambda: None,
        deadline=lambda: 25.0,
    ):
        self.log, self.rank, self.host, self.settings = log, rank, host, settings
        self.registry = registry
        self.bridge, self.sweeper, self.jobs = bridge, sweeper, jobs
        self.proc = proc
        self.sent, self.deadline = sent, deadline
        self.source = UsageSource()  # where job shells' usage is read (usage/unit_usage.py)
        try:
            with open(f"{proc}/self/mountinfo") as f:
                self.mounts = cgroups.parse_mounts(f.read())
        except OSError:
            self.mounts = {}
        self.layout = cgroups.layout(self.mounts)
        self.v1_memory = self.layout != cgroups.UNIFIED and "memory" in self.mounts
        self.oom_log = OomLog.open(kmsg) if self.v1_memory else None
        self.parent = None  # app-sdexec.slice's cgroup path, learnt from the first unit seen
        # SdProc -> _Account, for processes with a slice of their own. Weak: an account
        # goes with its process (a wait may be answered in the step that makes it DONE,
        # and a unit name is free for a new exec once the old one is released)
        self.accounts = weakref.WeakKeyDictionary()
        self.handing_on = set()  # _HandingOns in flight (job shells' ends being handed on)

    def place(self, p, props):
        """The start ``props`` of ``p`` with a slice of its own, if ``[sdexec] usage`` has
        its usage read (unchanged if the client chose a slice: then nothing is read), except
        a job shell's once systemd is known to keep an exited unit's figures (the unit
        source). While the source is not known, every unit's exit is heard (``accounted``):
        the first one's figures tell (``read_usage``)."""
        scope, job = self.settings.usage, shell_job(p)
        if scope == "none" or (scope == "jobs" and job is None) or PREFIX + "Slice" in p.cmd.opts:
            if self.source.source is None:
                p.accounted = True
            return props
        if job is not None and self.source.source == UNIT:
            self._account(p, None, job)
            return props
        name = cgroup_usage.accounting_slice(p.unit.name, os.urandom(4).hex())
        if name is None:
            return props
        self._account(p, name, job)
        return props + [("Slice", "s", name)]

    def _account(self, p, name, job):
        """``p``'s usage is read, from slice ``name`` (None: from the unit)."""
        acct = self.accounts[p] = _Account(name, job)
        p.accounted = True
        if job is not None:
            self.jobs.shell_started(job)
        return acct

    def adopted(self, p, props):
        """An adopted unit's slice, from what systemd says (``props``); a job shell's record
        is looked up before one is written (the module docstring), and what its job's
        gathering needs is asked now, as at a start (after an upgrade: the record read back
        before the shell ends, so the memo is not late). A job shell in no slice of ours
        (in ``app.slice``) was started under the unit source, or by an sdexec that read no
        usage: its figures are asked of systemd at its exit, unless this sdexec has learnt
        that systemd keeps none."""
        job, where = shell_job(p), props.get("Slice")
        if cgroup_usage.is_accounting_slice(where):
            acct = self._account(p, where, job)
        elif job is not None and where == DEFAULT_SLICE and self._unit_source_possible():
            acct = self._account(p, None, job)
        else:
            return
        if job is not None:
            exit_usec = props.get("ExecMainExitTimestamp")
            acct.look_up_first = True
            acct.exited_at = exit_usec / 1e6 if exit_usec else None

    def _unit_source_possible(self):
        return self.settings.usage != "none" and self.source.source != SLICE

    def find_slices(self, p):
        """``p`` runs (FindSlices): learn where the accounting slices are from its cgroup,
        if ``p`` has one and they are not known yet; a unit read from systemd at its exit:
        its own cgroup, read while it runs (``records``)."""
        acct = self.accounts.get(p)
        if acct is None or (acct.slice is not None and self.parent is not None):
            return
        own = self._own_cgroup(p.unit.pid, p.unit.name)
        if acct.slice is None:
            acct.cgroup = own
        elif own is not None:
            self.parent = posixpath.dirname(posixpath.dirname(own))

    def read_usage(self, p):
        """``p``'s exit is known (ReadUsage): read its slice, once, or ask systemd for its
        figures; the first exit of a unit still loaded asks them to learn the source."""
        acct = self.accounts.get(p)
        fresh = acct is not None and acct.usage is None and acct.handing_on is None
        from_unit = fresh and acct.slice is None
        learn = self.source.learning and p.unit.active_state in KEPT
        if fresh and not from_unit:
            self._exited(p, acct, self._record(p, acct, acct.exited_at))
        if from_unit or learn:
            self._ask(p, acct if from_unit else None, learn)

    def _ask(self, p, acct, learn):
        """Get the exited unit's ASKED figures, pipelined, without waiting: learn the source
        from them (``learn``), and make ``acct``'s record of them (unless None). Each Get has
        the per-call deadline: an unanswered one ends as ETIMEDOUT, its figure absent."""
        started, u = p.unit.started_at, p.unit
        wall = (acct.exited_at if acct and acct.exited_at else time.time()) - started
        wall = wall if started else None
        waiting = None
        if acct is not None:  # its answers wait for the record (after_usage)
            waiting = acct.handing_on = _HandingOn(p, acct, None, self.handing_on, self.log)
            self.handing_on.add(waiting)
        self.source.asking = self.source.asking or learn
        answers = {}

        def answered(name, exc, value=None):
            answers[name] = exc if exc is not None else value
            if len(answers) < len(unit_usage.ASKED):
                return
            try:
                if learn:
                    self._learnt(answers)
                if waiting is not None and acct.handing_on is waiting:  # not flushed (unload)
                    policy = p.cmd.opts.get(PREFIX + "OOMPolicy")
                    result = u.result or "success"
                    read = unit_usage.record(answers, wall, result, u.wait_status, policy)
                    self._exited(p, acct, read, waiting)
            except Exception as exc:  # in a pump(): log it, never leave the answers waiting
                self.log.error(f"{p.unit.name}: usage: {exc!r}")
                if waiting is not None and acct.handing_on is waiting:
                    waiting.send_waiting()

        for name in unit_usage.ASKED:
            on_reply = functools.partial(answered, name)
            try:
                self.bridge.get_property(p.unit.name, name, on_reply, timeout=self.deadline())
            except UnitError as exc:
                on_reply(exc)
        self.sent()

    def _learnt(self, answers):
        """The first exited unit's figures came: the source, logged once decided."""
        self.source.answered(answers)
        if self.source.source == UNIT:
            self.log.info("usage: read from each exited job shell's unit (systemd keeps it)")
        elif self.source.source == SLICE:
            self.log.info(f"usage: read from each job shell's slice: {self.source.reason}")

    def done(self, p):
        """``p`` is done (StopSlice): stop its slice when its unit goes.

        A unit goes when it is gone, stopping, asked to stop or be reset, or left to the
        sweeper. A unit let go while active keeps its slice: the sdexec that stops the unit
        later stops the slice too. So does a unit handed over at unload, even a stopping
        one: an IMP's unit between its STOPPING=1 and its exit, whose usage the next sdexec
        reads from the slice.
        """
        acct = self.accounts.get(p)
        if acct is None:
            return
        acct.look_up_first = False
        if acct.slice is None:
            return
        swept = p.unit.name in self.sweeper  # its start unanswered, say
        sent = p.calls.stop_sent or p.calls.reset_sent
        going = p.unit.gone or p.unit.stopping or sent or swept
        if going and not acct.stopped and not acct.handed_over:
            acct.stopped = True
            self.stop_slice(acct.slice)

    def stop_slice(self, name):
        """Stop accounting slice ``name``; a stop that did not go through (lost to a
        manager reexec, not answered) hands the slice to the sweeper, which stops it until
        systemd lets go."""

        def on_reply(exc):
            if exc is not None and exc.errno != errno.ENOENT:
                self.sweeper.sweep(name, f"stop: {exc}")

        try:
            self.bridge.stop_unit(name, on_reply=on_reply)
        except UnitError as exc:
            on_reply(exc)

    def _own_cgroup(self, pid, unit):
        """The cgroup path of ``unit`` (in an accounting slice: its parent's parent is
        ``app-sdexec.slice``'s), from where its process ``pid`` is; None when the process is
        gone already (the next unit tells) or in no cgroup of the unit."""
        try:
            with open(f"{self.proc}/{pid}/cgroup") as f:
                paths = cgroups.parse_proc_cgroup(f.read())
        except OSError:
            return None
        for hierarchy in (cgroups.V2, "name=systemd"):
            own = cgroups.unit_dir(paths.get(hierarchy), unit)
            if own is not None:
                return own
        return None

    def after_usage(self, p, send):
        """Call ``send(usage)`` once ``p``'s usage is known, with its JSON (None when
        unknown): now, or, for a job shell that ended, once its row is handed on (the
        module docstring); sends wait in order."""
        acct = self.accounts.get(p)
        if acct is not None and acct.handing_on is not None:
            acct.handing_on.waiting.append(send)
        else:
            send(acct.usage_json() if acct is not None else None)

    def flush(self):
        """At unload: the handing on still out will not be answered; send what waits on it
        (an adopted shell's usage unknown: its answers go without it)."""
        for handing_on in list(self.handing_on):
            if handing_on.acct.usage is None:
                self.log.error(f"{handing_on.p.unit.name}: usage: unload before the job's record")
            handing_on.send_waiting()

    def slices(self, procs):
        """The accounting slices of ``procs`` (the guard of handed-over units stops them too,
        should no sdexec take the units over; a load stops the others it finds)."""
        accounts = (self.accounts.get(p) for p in procs)
        return {acct.slice for acct in accounts if acct is not None and acct.slice is not None}

    def hand_over(self, procs):
        """At unload, before the last inputs: the slices of ``procs``, the processes handed
        over to the next sdexec, stay with their units (``done`` stops none of them);
        returns them (``slices``)."""
        procs = list(procs)
        for p in procs:
            acct = self.accounts.get(p)
            if acct is not None:
                acct.handed_over = True
        return self.slices(procs)

    def records(self, plain):
        """``sdexec.usage``'s answer: the records of this rank's processes with a slice (of
        job ``plain`` only, unless None), read now for the running ones."""
        procs = [self._now(p, acct) for p, acct in self._accounts(plain)]
        return {"rank": self.rank, "host": self.host, "procs": procs}

    def live_rows(self, plain):
        """This rank's row of job ``plain`` for ``sdexec.usage-live``: ``{rank: row}``, its
        running shell's if any, read now (empty: no shell of the job here)."""
        own = {}
        for p, acct in self._accounts(plain):
            row = self._now(p, acct)
            if self.rank not in own or row["running"]:
                own[self.rank] = dict(row, rank=self.rank, host=self.host)
        return own

    def _accounts(self, plain):
        """``(p, its _Account)`` of the processes with a slice; of job ``plain`` only, unless
        None."""
        for p in list(self.registry):
            acct = self.accounts.get(p)
            if acct is not None and (plain is None or acct.job == plain):
                yield p, acct

    def _now(self, p, acct):
        """``p``'s record as ``sdexec.usage`` gives it: kept if read at its exit, else read
        now (``running`` while it runs)."""
        handing_on = acct.handing_on  # its end being handed on: it ended
        running = acct.usage is None and handing_on is None
        if acct.usage is not None:
            rec = acct.usage
        elif handing_on is not None and handing_on.read is not None:
            rec = handing_on.read
        else:  # running, or its figures asked of systemd: what its cgroup has now
            rec = self._record(p, acct)
        return rec.live(p.unit.name, acct.job, running)

    def close(self):
        """Close /dev/kmsg (at unload)."""
        if self.oom_log is not None:
            self.oom_log.close()

    # ---- reads ----

    def _read(self, directory):
        def read(hierarchy, name):
            where = self.mounts.get(hierarchy)
            if where is None:
                return None
            mount, root = where
            rel = (
                directory[len(root) :] if root != "/" and directory.startswith(root) else directory
            )
            try:
                with open(f"{mount}{rel}/{name}") as f:
                    return f.read()
            except OSError:
                return None

        return read

    def _record(self, p, acct, exited_at=None):
        """The UsageRecord of ``p`` read now from its slice's cgroup (its own cgroup's, read
        from the unit at its exit); ``exited_at``: when it exited, if before now."""
        started = p.unit.started_at
        wall = (exited_at or time.time()) - started if started else None
        u = p.unit
        if acct.slice is not None:
            where = f"{self.parent}/{acct.slice}" if self.parent is not None else None
            missing = UNKNOWN_PARENT
        else:
            where, missing = acct.cgroup, UNKNOWN_CGROUP
        read = self._read(where)
        missing = None if where is not None else missing
        result, status = (u.result or "success", u.wait_status) if u.finished else (None, None)
        slice_ = acct.slice
        kills = self.oom_log.kills(slice_, u.finished) if self.oom_log and slice_ else None
        return cgroup_usage.record(self.layout, read, kills, wall, result, status, missing)

    def _exited(self, p, acct, read, handing_on=None):
        """``p``'s record ``read`` at its exit (from its slice, which goes once p is done, or
        from its unit: ``handing_on`` waited for systemd's answers); a job shell's record
        goes to its job, and its usage is known once handed on (an adopted one's: once
        its job's record is looked up, first) (the module docstring)."""
        self.log.debug(f"{p.unit.name}: usage {json.dumps(read.to_json(), sort_keys=True)}")
        if acct.job is None:
            acct.usage = read
            if handing_on is not None:
                handing_on.handed_on(read)
            return
        look_up_first, acct.look_up_first = acct.look_up_first, False
        if not look_up_first:
            acct.usage = read
        if handing_on is None:
            handing_on = _HandingOn(p, acct, read, self.handing_on, self.log)
            self.handing_on.add(handing_on)
        handing_on.read = read
        acct.handing_on = handing_on
        memory_max = p.cmd.opts.get(PREFIX + "MemoryMax")
        self.jobs.shell_ended(
            acct.job, p.unit.name, read, memory_max, handing_on.handed_on, look_up_first
        )


class _Account:
    """One process's accounting, written by Accounting alone: its slice, its usage once
    read, and where the adopted job shell's lookup and the slice's stop are."""

    __slots__ = (
        "slice",
        "cgroup",
        "job",
        "usage",
        "look_up_first",
        "exited_at",
        "handing_on",
        "stopped",
        "handed_over",
    )

    def __init__(self, name, job):
        self.slice = name  # the accounting slice it runs in; None: read from the unit
        self.cgroup = None  # the unit's own cgroup, read from the unit: seen running
        self.job = job  # the job (f58plain) it is the shell of, or None
        self.usage = None  # its UsageRecord, read at its exit (or its job's, adopted)
        self.look_up_first = False  # an adopted job shell whose job's record may exist already
        self.exited_at = None  # when it exited, from systemd (adopted), epoch seconds
        self.handing_on = None  # the _HandingOn of its end, while in flight
        self.stopped = False  # its slice's stop was sent
        self.handed_over = False  # its unit is left to the next sdexec at unload: the slice too

    def usage_json(self):
        """The JSON of its usage, or None while unknown."""
        return self.usage.to_json() if self.usage is not None else None


class _HandingOn:
    """One job shell's end being handed on (its job's record looked up first, adopted):
    the record read at its exit (None while systemd's figures are asked), and the sends
    (after_usage) that wait for the usage."""

    __slots__ = ("p", "acct", "read", "waiting", "in_flight", "log")

    def __init__(self, p, acct, read, in_flight, log):
        self.p, self.acct, self.read, self.waiting = p, acct, read, []
        self.in_flight, self.log = in_flight, log

    def handed_on(self, usage):
        """Handed on: ``usage`` (a UsageRecord) is the process's usage; send what waits.
        Nothing after a flush at unload."""
        if self.acct.handing_on is not self:
            return
        self.acct.usage = usage
        self.send_waiting()

    def send_waiting(self):
        """Send what waits, each once, with the usage (None if unknown); one that
        raises is logged."""
        self.acct.handing_on = None
        self.in_flight.discard(self)
        waiting, self.waiting = self.waiting, []
        usage = self.acct.usage_json()
        for send in waiting:
            try:
                send(usage)
            except Exception as exc:
                self.log.error(f"{self.p.unit.name}: wait answer: {exc!r}")
