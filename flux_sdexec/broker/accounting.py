"""What each unit used, read from its accounting slice, and where users find it.

Every unit sdexec starts gets ``Slice=`` a slice of its own (``containment.cgroup_usage``), unless
the client chose a slice. When the process is known to have exited, the slice's cgroup
files are read once (5-7 small files: ~50 µs here) and the record is kept on the SdProc: logged at
debug level, answered in ``sdexec.wait`` (field ``usage``), and, for a job shell, written to
the job's KVS directory as ``sdexec-usage.<rank>`` by this rank (one asynchronous commit
from each rank, beside the job's other keys; ``flux job info JOBID sdexec-usage.<rank>``).
OOM kills of a job shell's unit become a non-fatal job exception of type ``oom``. The slice
is stopped once the unit is gone. Nothing here blocks or raises into the caller: a failed
read or commit is logged.

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
"""

import errno
import json
import os
import socket
import time

from flux_sdexec.broker.kmsg import OomLog
from flux_sdexec.cli.unitrows import job_id
from flux_sdexec.containment import cgroups, cgroup_usage
from flux_sdexec.core.errors import UnitError
from flux_sdexec.core.properties import PREFIX
from flux_sdexec.core.states import ProcState

KVS_DIR = "sdexec-usage"
UNKNOWN_PARENT = (
    "where the accounting slices are is not known yet (no unit's process seen alive since load)"
)
OOM_TYPE = "oom"


class Accounting:
    """One per SdexecService. Args: svc (its handle, rank, bridge, log), proc root."""

    def __init__(self, svc, proc="/proc", kmsg="/dev/kmsg"):
        self.svc, self.proc = svc, proc
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
        # adopted job shells whose job's record may exist already: id(p) -> (p, exit time)
        self.unchecked = {}
        self.checking = {}  # their lookups in flight: id(p) -> _Check

    def place(self, p, props):
        """The start ``props`` of ``p`` with a slice of its own (unchanged if the client
        chose a slice: then nothing is read)."""
        if PREFIX + "Slice" not in p.cmd.opts:
            p.accounting_slice = cgroup_usage.accounting_slice(p.unit.name, os.urandom(4).hex())
        if p.accounting_slice is None:
            return props
        return props + [("Slice", "s", p.accounting_slice)]

    def adopted(self, p, props):
        """An adopted unit's slice, from what systemd says (``props``); a job shell's record
        is looked up before one is written (the module docstring)."""
        if cgroup_usage.is_accounting_slice(props.get("Slice")):
            p.accounting_slice = props["Slice"]
            if _job_of(p) is not None:
                exit_usec = props.get("ExecMainExitTimestamp")
                self.unchecked[id(p)] = (p, exit_usec / 1e6 if exit_usec else None)

    def observe(self, p):
        """After each input of ``p``: learn where slices are, read ``p``'s at its exit, stop
        it once sdexec is done with a unit that is gone, asked to stop or be reset, or left to
        the sweeper (a unit let go while active, kept for the next sdexec or abandoned, keeps
        its slice: the sdexec that stops it later stops the slice)."""
        try:
            name = p.accounting_slice
            if name is None:
                return
            if p.usage is None and id(p) not in self.checking:
                if self.parent is None and p.unit.pid:
                    self._learn(p.unit.pid, p.unit.name)
                if p.unit.finished and id(p) in self.unchecked:
                    self._check(p)
                elif p.unit.finished:
                    self._finished(p)
            swept = p.unit.name in self.svc.sweeper  # its start unanswered, say
            going = p.unit.gone or p.calls.stop_sent or p.calls.reset_sent or swept
            if p.state is ProcState.DONE and going and not p.slice_stopped:
                p.slice_stopped = True
                self._stop_slice(name)
            if p.state is ProcState.DONE:
                self.unchecked.pop(id(p), None)
        except Exception as exc:  # never in the way of the exec's own answers
            self.svc.log.error(f"{p.unit.name}: usage: {exc!r}")

    def after_usage(self, p, send):
        """Call ``send()`` once ``p.usage`` is settled: now, or from the reply of the lookup
        of its job's record (an adopted job shell, the module docstring)."""
        check = self.checking.get(id(p))
        if check is None:
            send()
        else:
            check.waiting.append(send)

    def flush(self):
        """At unload: the lookups still out will not be answered; send what waits on them
        (the usage unknown: answers go without it)."""
        checks, self.checking = list(self.checking.values()), {}
        for check in checks:
            self.svc.log.error(f"{check.p.unit.name}: usage: unload before the job's record")
            check.release(self.svc.log)

    def slices(self, procs):
        """The accounting slices of ``procs`` (the guard of handed-over units stops them too,
        should no sdexec take the units over)."""
        return {p.accounting_slice for p in procs if p.accounting_slice is not None}

    def answer(self, msg):
        """``sdexec.usage {"jobid"?: f58plain}``: the records of this rank's job shells (all
        processes without ``jobid``), read now for the running ones."""
        from flux_sdexec.broker.messages import payload_of  # flux's: not in the unit tier

        want = payload_of(msg, "usage").get("jobid")
        procs = []
        for p in list(self.svc.registry):
            plain = job_id(p.cmd.label) or job_id(p.unit.name)
            if want is not None and plain != want:
                continue
            if p.accounting_slice is None:
                continue
            check = self.checking.get(id(p))  # its job's record being looked up: it ended
            running = p.usage is None and check is None
            rec = p.usage if p.usage is not None else check.read if check else self._record(p)
            entry = {"unit": p.unit.name, "jobid": plain, "running": running}
            procs.append(dict(rec, **entry))
        self.svc.responder.respond(msg, {"rank": self.svc.rank, "host": self.host, "procs": procs})

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

    def _record(self, p, exited_at=None):
        """The record of ``p`` read now; ``exited_at``: when it exited, if before now."""
        started = p.unit.started_at
        wall = (exited_at or time.time()) - started if started else None
        u = p.unit
        name = p.accounting_slice
        read = self._read(f"{self.parent}/{name}")
        missing = None if self.parent is not None else UNKNOWN_PARENT
        if not u.finished:
            kills = self.oom_log.peek(name) if self.oom_log else None
            return cgroup_usage.record(self.layout, read, kills, wall, None, None, missing)
        kills = self.oom_log.take(name) if self.oom_log else None
        result, status = u.result or "success", u.wait_status
        return cgroup_usage.record(self.layout, read, kills, wall, result, status, missing)

    def close(self):
        """Close /dev/kmsg (at unload)."""
        if self.oom_log is not None:
            self.oom_log.close()

    def _finished(self, p, rec=None):
        p.usage = rec or self._record(p)
        self.svc.log.debug(f"{p.unit.name}: usage {json.dumps(p.usage, sort_keys=True)}")
        plain = _job_of(p)
        if plain is not None:
            self._to_job(p, plain)

    # ---- an adopted job shell: its job's record first ----

    def _check(self, p):
        """Read ``p``'s slice now (it goes once p is done), and look the job's record up
        before writing one."""
        _, exited_at = self.unchecked.pop(id(p))
        check = self.checking[id(p)] = _Check(p, self._record(p, exited_at))
        plain = _job_of(p)

        def on_reply(exc, record=None):
            if self.checking.get(id(p)) is not check:
                return  # flushed at unload
            del self.checking[id(p)]
            try:
                self._settle(p, plain, check.read, exc, record)
            except Exception as bug:  # the held answers go out all the same
                self.svc.log.error(f"{p.unit.name}: usage: {bug!r}")
            check.release(self.svc.log)

        try:
            self._lookup(plain, on_reply)
        except Exception as exc:  # not sent: whether it is written stays unknown
            on_reply(exc if isinstance(exc, OSError) else OSError(errno.EINVAL, repr(exc)))

    def _settle(self, p, plain, read, exc, record):
        """The lookup's reply: the record found is ``p``'s usage; none (ENOENT) has the one
        ``read`` at the exit written; an error leaves the KVS alone."""
        if record is not None:
            p.usage = {k: v for k, v in record.items() if k not in _PLACE}
            self.svc.log.info(
                f"{p.unit.name}: usage of job {plain} on rank {self.svc.rank} was recorded "
                "by the sdexec before: kept"
            )
        elif exc is None or exc.errno == errno.ENOENT:
            self._finished(p, read)
        else:
            p.usage = read
            self.svc.log.error(
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

        key = f"job.{JobID(plain).dothex}.{KVS_DIR}.{self.svc.rank}"
        future = Future(flux.kvs.RAW.flux_kvs_lookup(self.svc.h, None, 0, key))

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

    def _to_job(self, p, plain):
        import flux.kvs  # flux's: not in the unit tier
        from flux.job import JobID, job_raise_async

        jobid = JobID(plain)
        rec = dict(p.usage, rank=self.svc.rank, host=self.host, unit=p.unit.name)
        txn = flux.kvs.KVSTxn(self.svc.h, f"job.{jobid.dothex}.{KVS_DIR}")
        txn.put(str(self.svc.rank), rec)
        self._hold(flux.kvs.commit_async(self.svc.h, _kvstxn=txn), f"{p.unit.name}: usage")
        kills = p.usage.get("oom_kills")
        if kills:
            limit = p.cmd.opts.get(PREFIX + "MemoryMax")
            note = (
                f"rank {self.svc.rank} ({self.host}): {kills} task(s) killed by the OOM "
                f"killer, " + (f"MemoryMax={limit}" if limit else "no MemoryMax set")
            )
            future = job_raise_async(self.svc.h, jobid, OOM_TYPE, 1, note)
            self._hold(future, f"{p.unit.name}: oom exception")

    def _hold(self, future, what):
        """Keep ``future`` until it is fulfilled; log its error."""

        def done(f):
            self.pending.discard(f)
            try:
                f.get()
            except OSError as exc:
                self.svc.log.error(f"{what}: {exc.strerror or exc}")

        self.pending.add(future)
        future.then(done)

    def _stop_slice(self, name):
        """A stop that did not go through (lost to a manager reexec, not answered) hands the
        slice to the sweeper, which stops it until systemd lets go."""

        def on_reply(exc):
            if exc is not None and exc.errno != errno.ENOENT:
                self.svc.sweeper.sweep(name, f"stop: {exc}")

        try:
            self.svc.bridge.stop_unit(name, on_reply=on_reply)
        except UnitError as exc:
            on_reply(exc)


_PLACE = ("rank", "host", "unit")  # what a job's record adds to a process's usage


def _job_of(p):
    """The f58plain job id of a job shell's SdProc ``p``, or None."""
    return job_id(p.cmd.label) or job_id(p.unit.name)


class _Check:
    """One adopted job shell's lookup in flight: the record read at its exit, and the
    sends (after_usage) that wait for the reply."""

    __slots__ = ("p", "read", "waiting")

    def __init__(self, p, read):
        self.p, self.read, self.waiting = p, read, []

    def release(self, log):
        """Send what waits, each once; one that raises is logged."""
        waiting, self.waiting = self.waiting, []
        for send in waiting:
            try:
                send()
            except Exception as exc:
                log.error(f"{self.p.unit.name}: wait answer: {exc!r}")
