"""What each unit used, read from its accounting slice, and where users find it.

Every unit sdexec starts gets ``Slice=`` a slice of its own (``containment.cgroup_usage``), unless
the client chose a slice. When the process is known to have exited, the slice's cgroup
files are read once (5-7 small files: ~50 µs here) into a ``core.usage_record.UsageRecord``,
kept here with the rest of the process's accounting (``_Account``, written by this module
alone): logged at debug level, answered in ``sdexec.wait`` (field ``usage``), and, for a job
shell, written to the job's KVS directory as ``sdexec-usage.<rank>`` by this rank (one
asynchronous commit from each rank, beside the job's other keys; ``flux job info JOBID
sdexec-usage.<rank>``). OOM kills of a job shell's unit become a non-fatal job exception of
type ``oom``. The slice is stopped once the unit is gone. Nothing here blocks or raises into
the caller: a failed read or commit is logged.

A job shell adopted at load may have ended under the sdexec before (a bgexec shell that
ended while job-exec was out for an upgrade, or just before a crash): that sdexec wrote its
record, raised its ``oom`` exception and, at an unload, stopped its slice. Reading the
slice again would give nulls (it is gone) or count the OOM kills a second time. So the
first read of an adopted job shell's exit looks its record up in the job's KVS directory
first, without waiting (a KVS lookup answered on the reactor): there, the record written
is the process's usage and nothing is written or raised; not there, the figures read at
the exit are written as for any exec. The KVS is the one place that survives both an
upgrade and a crash, and a record written is never one this sdexec has to guess. A wait
answered meanwhile goes out from the lookup's reply (``after_usage``), with the record.

Imports no CLI module; flux only inside the methods that talk to the KVS and job manager.
"""

import errno
import json
import os
import socket
import time
import weakref

from flux_sdexec.broker.kmsg import OomLog
from flux_sdexec.containment import cgroups, cgroup_usage
from flux_sdexec.core.errors import UnitError
from flux_sdexec.core.properties import PREFIX
from flux_sdexec.core.shelljobs import shell_job
from flux_sdexec.core.states import ProcState
from flux_sdexec.core.usage_record import UsageRecord, kvs_dir, kvs_key

UNKNOWN_PARENT = (
    "where the accounting slices are is not known yet (no unit's process seen alive since load)"
)
OOM_TYPE = "oom"


class Accounting:
    """The accounting of one SdexecService's processes.

    Args:
        handle: the module's flux handle (KVS commits and lookups, job exceptions).
        log: the module's BrokerLogger.
        rank: this broker's rank.
        registry: the service's Registry (``sdexec.usage`` answers from it).
        responder: the service's Responder.
        bridge: the SystemdBridge that stops slices.
        sweeper: the Sweeper: a unit in it is let go; a slice whose stop failed goes to it.
        proc: the /proc root; kmsg: the kernel log (v1 OOM kills).
    """

    def __init__(
        self,
        handle,
        log,
        rank,
        registry,
        responder,
        bridge,
        sweeper,
        proc="/proc",
        kmsg="/dev/kmsg",
    ):
        self.h, self.log, self.rank = handle, log, rank
        self.registry, self.responder = registry, responder
        self.bridge, self.sweeper = bridge, sweeper
        self.proc = proc
        self.host = socket.gethostname()
        try:
            with open(f"{proc}/self/mountinfo") as f:
                self.mounts = cgroups.parse_mounts(f.read())
        except OSError:
            self.mounts = {}
        self.layout = cgroups.layout(self.mounts)
        self.v1_memory = self.layout != cgroups.UNIFIED and "memory" in self.mounts
        self.oom_log = OomLog.open(kmsg) if self.v1_memory else None
        self.parent = None  # app-sdexec.slice's cgroup path, learnt from the first unit seen
        self.pending = set()  # futures of commits, exceptions and lookups in flight
        # SdProc -> _Account, for processes with a slice of their own. Weak: an account
        # goes with its process (a wait may be answered in the step that makes it DONE,
        # and a unit name is free for a new exec once the old one is released)
        self.accounts = weakref.WeakKeyDictionary()
        self.checking = set()  # _Checks in flight (adopted job shells' lookups)

    def place(self, p, props):
        """The start ``props`` of ``p`` with a slice of its own (unchanged if the client
        chose a slice: then nothing is read)."""
        if PREFIX + "Slice" in p.cmd.opts:
            return props
        name = cgroup_usage.accounting_slice(p.unit.name, os.urandom(4).hex())
        if name is None:
            return props
        self.accounts[p] = _Account(name)
        return props + [("Slice", "s", name)]

    def adopted(self, p, props):
        """An adopted unit's slice, from what systemd says (``props``); a job shell's record
        is looked up before one is written (the module docstring)."""
        if cgroup_usage.is_accounting_slice(props.get("Slice")):
            acct = self.accounts[p] = _Account(props["Slice"])
            if shell_job(p) is not None:
                exit_usec = props.get("ExecMainExitTimestamp")
                acct.unchecked = True
                acct.exited_at = exit_usec / 1e6 if exit_usec else None

    def reached(self, p):
        """``p`` reached its current state (after each input): act on what it passed.
        Its process seen alive: learn where slices are; its exit known: read its slice;
        DONE with a unit that is gone, asked to stop or be reset, or left to the sweeper:
        stop the slice (a unit let go while active, kept for the next sdexec or abandoned,
        keeps its slice: the sdexec that stops it later stops the slice)."""
        acct = self.accounts.get(p)
        if acct is None:
            return
        try:
            if acct.usage is None and acct.check is None:
                if self.parent is None and p.unit.pid:
                    self._learn(p.unit.pid, p.unit.name)
                if p.unit.finished and acct.unchecked:
                    self._check(p, acct)
                elif p.unit.finished:
                    self._finished(p, acct)
            if p.state is ProcState.DONE:
                acct.unchecked = False
                swept = p.unit.name in self.sweeper  # its start unanswered, say
                going = p.unit.gone or p.calls.stop_sent or p.calls.reset_sent or swept
                if going and not acct.stopped:
                    acct.stopped = True
                    self._stop_slice(acct.slice)
        except Exception as exc:  # never in the way of the exec's own answers
            self.log.error(f"{p.unit.name}: usage: {exc!r}")

    def after_usage(self, p, send):
        """Call ``send(usage)`` once ``p``'s usage is settled, with its JSON (None when
        unknown): now, or from the reply of the lookup of its job's record (an adopted job
        shell, the module docstring)."""
        acct = self.accounts.get(p)
        if acct is not None and acct.check is not None:
            acct.check.waiting.append(send)
        else:
            send(acct.usage_json() if acct is not None else None)

    def flush(self):
        """At unload: the lookups still out will not be answered; send what waits on them
        (the usage unknown: answers go without it)."""
        checks, self.checking = list(self.checking), set()
        for check in checks:
            check.acct.check = None
            self.log.error(f"{check.p.unit.name}: usage: unload before the job's record")
            check.release(self.log)

    def slices(self, procs):
        """The accounting slices of ``procs`` (the guard of handed-over units stops them too,
        should no sdexec take the units over; a load stops the others it finds)."""
        accounts = (self.accounts.get(p) for p in procs)
        return {acct.slice for acct in accounts if acct is not None}

    def answer(self, msg):
        """``sdexec.usage {"jobid"?: f58plain}``: the records of this rank's job shells (all
        processes without ``jobid``), read now for the running ones."""
        from flux_sdexec.broker.messages import payload_of  # flux's: not in the unit tier

        want = payload_of(msg, "usage").get("jobid")
        procs = []
        for p in list(self.registry):
            plain = shell_job(p)
            if want is not None and plain != want:
                continue
            acct = self.accounts.get(p)
            if acct is None:
                continue
            check = acct.check  # its job's record being looked up: it ended
            running = acct.usage is None and check is None
            if acct.usage is not None:
                rec = acct.usage
            else:
                rec = check.read if check else self._record(p, acct.slice)
            procs.append(rec.live(p.unit.name, plain, running))
        self.responder.respond(msg, {"rank": self.rank, "host": self.host, "procs": procs})

    def close(self):
        """Close /dev/kmsg (at unload)."""
        if self.oom_log is not None:
            self.oom_log.close()

    # ---- reads ----

    def _learn(self, pid, unit):
        try:
            with open(f"{self.proc}/{pid}/cgroup") as f:
                paths = cgroups.parse_proc_cgroup(f.read())
        except OSError:
            return  # gone already: the next unit tells
        for hierarchy in (cgroups.V2, "name=systemd"):
            own = cgroups.unit_dir(paths.get(hierarchy), unit)
            if own is not None:
                self.parent = os.path.dirname(os.path.dirname(own))
                return

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

    def _record(self, p, name, exited_at=None):
        """The UsageRecord of ``p``, whose slice is ``name``, read now; ``exited_at``: when
        it exited, if before now."""
        started = p.unit.started_at
        wall = (exited_at or time.time()) - started if started else None
        u = p.unit
        read = self._read(f"{self.parent}/{name}")
        missing = None if self.parent is not None else UNKNOWN_PARENT
        if not u.finished:
            kills = self.oom_log.peek(name) if self.oom_log else None
            return cgroup_usage.record(self.layout, read, kills, wall, None, None, missing)
        kills = self.oom_log.take(name) if self.oom_log else None
        result, status = u.result or "success", u.wait_status
        return cgroup_usage.record(self.layout, read, kills, wall, result, status, missing)

    def _finished(self, p, acct, rec=None):
        acct.usage = rec or self._record(p, acct.slice)
        self.log.debug(f"{p.unit.name}: usage {json.dumps(acct.usage_json(), sort_keys=True)}")
        plain = shell_job(p)
        if plain is not None:
            self._to_job(p, plain, acct.usage)

    # ---- an adopted job shell: its job's record first ----

    def _check(self, p, acct):
        """Read ``p``'s slice now (it goes once p is done), and look the job's record up
        before writing one."""
        acct.unchecked = False
        check = acct.check = _Check(p, acct, self._record(p, acct.slice, acct.exited_at))
        self.checking.add(check)
        plain = shell_job(p)

        def on_reply(exc, record=None):
            if acct.check is not check:
                return  # flushed at unload
            acct.check = None
            self.checking.discard(check)
            try:
                self._settle(p, acct, plain, check.read, exc, record)
            except Exception as bug:  # the held answers go out all the same
                self.log.error(f"{p.unit.name}: usage: {bug!r}")
            check.release(self.log)

        try:
            self._lookup(plain, on_reply)
        except Exception as exc:  # not sent: whether it is written stays unknown
            on_reply(exc if isinstance(exc, OSError) else OSError(errno.EINVAL, repr(exc)))

    def _settle(self, p, acct, plain, read, exc, record):
        """The lookup's reply: the record found is ``p``'s usage; none (ENOENT) has the one
        ``read`` at the exit written; an error leaves the KVS alone."""
        if record is not None:
            acct.usage = UsageRecord.from_json(record)
            self.log.info(
                f"{p.unit.name}: usage of job {plain} on rank {self.rank} was recorded "
                "by the sdexec before: kept"
            )
        elif exc is None or exc.errno == errno.ENOENT:
            self._finished(p, acct, read)
        else:
            acct.usage = read
            self.log.error(
                f"{p.unit.name}: usage: cannot tell whether job {plain}'s record is written"
                f" ({exc.strerror or exc}): left as it is"
            )

    def _lookup(self, plain, on_reply):
        """Look up ``job.<id>.sdexec-usage.<rank>`` without waiting; from the reactor,
        ``on_reply(None, record)``, ``on_reply(None)`` when absent, or ``on_reply(OSError)``."""
        import flux.kvs  # flux's: not in the unit tier
        from flux.core.inner import ffi
        from flux.future import Future
        from flux.job import JobID

        key = kvs_key(JobID(plain).dothex, self.rank)
        future = Future(flux.kvs.RAW.flux_kvs_lookup(self.h, None, 0, key))

        def done(f):
            self.pending.discard(f)
            exc, record = None, None
            try:
                valp = ffi.new("char *[1]")
                flux.kvs.RAW.flux_kvs_lookup_get(f, valp)
                record = json.loads(ffi.string(valp[0]).decode()) if valp[0] else None
                if not isinstance(record, dict):
                    raise OSError(errno.EPROTO, f"{key}: not a usage record")
            except OSError as err:
                exc = None if err.errno == errno.ENOENT else err
            except Exception as err:  # a callback must not raise into the reactor
                exc = OSError(errno.EPROTO, f"{key}: {err!r}")
            on_reply(exc, record if exc is None else None)

        self.pending.add(future)
        future.then(done)

    # ---- the job's record and exception ----

    def _to_job(self, p, plain, usage):
        import flux.kvs  # flux's: not in the unit tier
        from flux.job import JobID, job_raise_async

        jobid = JobID(plain)
        txn = flux.kvs.KVSTxn(self.h, kvs_dir(jobid.dothex))
        txn.put(str(self.rank), usage.placed(self.rank, self.host, p.unit.name))
        self._hold(flux.kvs.commit_async(self.h, _kvstxn=txn), f"{p.unit.name}: usage")
        kills = usage.oom_kills
        if kills:
            limit = p.cmd.opts.get(PREFIX + "MemoryMax")
            note = (
                f"rank {self.rank} ({self.host}): {kills} task(s) killed by the OOM "
                f"killer, " + (f"MemoryMax={limit}" if limit else "no MemoryMax set")
            )
            future = job_raise_async(self.h, jobid, OOM_TYPE, 1, note)
            self._hold(future, f"{p.unit.name}: oom exception")

    def _hold(self, future, what):
        """Keep ``future`` until it is fulfilled; log its error."""

        def done(f):
            self.pending.discard(f)
            try:
                f.get()
            except OSError as exc:
                self.log.error(f"{what}: {exc.strerror or exc}")

        self.pending.add(future)
        future.then(done)

    def _stop_slice(self, name):
        """A stop that did not go through (lost to a manager reexec, not answered) hands the
        slice to the sweeper, which stops it until systemd lets go."""

        def on_reply(exc):
            if exc is not None and exc.errno != errno.ENOENT:
                self.sweeper.sweep(name, f"stop: {exc}")

        try:
            self.bridge.stop_unit(name, on_reply=on_reply)
        except UnitError as exc:
            on_reply(exc)


class _Account:
    """One process's accounting, written by Accounting alone: its slice, its usage once
    read, and where the adopted job shell's lookup and the slice's stop are."""

    __slots__ = ("slice", "usage", "unchecked", "exited_at", "check", "stopped")

    def __init__(self, name):
        self.slice = name  # the accounting slice it runs in
        self.usage = None  # its UsageRecord, read at its exit (or its job's, adopted)
        self.unchecked = False  # an adopted job shell whose job's record may exist already
        self.exited_at = None  # when it exited, from systemd (adopted), epoch seconds
        self.check = None  # the _Check of its job's record in flight
        self.stopped = False  # its slice's stop was sent

    def usage_json(self):
        """The JSON of its usage, or None while unknown."""
        return self.usage.to_json() if self.usage is not None else None


class _Check:
    """One adopted job shell's lookup in flight: the record read at its exit, and the
    sends (after_usage) that wait for the reply."""

    __slots__ = ("p", "acct", "read", "waiting")

    def __init__(self, p, acct, read):
        self.p, self.acct, self.read, self.waiting = p, acct, read, []

    def release(self, log):
        """Send what waits, each once, with the usage settled (None if unknown); one that
        raises is logged."""
        waiting, self.waiting = self.waiting, []
        usage = self.acct.usage_json()
        for send in waiting:
            try:
                send(usage)
            except Exception as exc:
                log.error(f"{self.p.unit.name}: wait answer: {exc!r}")
