"""What each unit used, read from its accounting slice, and where users find it.

Every unit sdexec starts gets ``Slice=`` a slice of its own (``containment.usage``), unless
the client chose a slice. When the process is known to have exited, the slice's cgroup
files are read once (5-7 small files: ~50 µs here) and the record is kept on the SdProc: logged at
debug level, answered in ``sdexec.wait`` (field ``usage``), and, for a job shell, written to
the job's KVS directory as ``sdexec-usage.<rank>`` by this rank (one asynchronous commit
from each rank, beside the job's other keys; ``flux job info JOBID sdexec-usage.<rank>``).
OOM kills of a job shell's unit become a non-fatal job exception of type ``oom``. The slice
is stopped once the unit is gone. Nothing here blocks or raises into the caller: a failed
read or commit is logged.
"""

import errno
import json
import os
import socket
import time

from flux_sdexec.adapters.kmsg import OomLog
from flux_sdexec.cli.unitrows import job_id
from flux_sdexec.containment import cgroups, usage
from flux_sdexec.errors import UnitError
from flux_sdexec.properties import PREFIX
from flux_sdexec.states import ProcState

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
        self.pending = set()  # futures of commits and exceptions in flight

    def place(self, p, props):
        """The start ``props`` of ``p`` with a slice of its own (unchanged if the client
        chose a slice: then nothing is read)."""
        if PREFIX + "Slice" not in p.cmd.opts:
            p.accounting_slice = usage.accounting_slice(p.unit.name, os.urandom(4).hex())
        if p.accounting_slice is None:
            return props
        return props + [("Slice", "s", p.accounting_slice)]

    def adopted(self, p, props):
        """An adopted unit's slice, from what systemd says (``props``)."""
        if usage.is_accounting_slice(props.get("Slice")):
            p.accounting_slice = props["Slice"]

    def observe(self, p):
        """After each input of ``p``: learn where slices are, read ``p``'s at its exit, stop
        it once sdexec is done with a unit that is gone, asked to stop or be reset, or left to
        the sweeper (a unit let go while active, kept for the next sdexec or abandoned, keeps
        its slice: the sdexec that stops it later stops the slice)."""
        try:
            name = p.accounting_slice
            if name is None:
                return
            if p.usage is None:
                if self.parent is None and p.unit.pid:
                    self._learn(p.unit.pid, p.unit.name)
                if p.unit.finished:
                    self._finished(p)
            swept = p.unit.name in self.svc.sweeper  # its start unanswered, say
            going = p.unit.gone or p.stop_sent or p.reset_sent or swept
            if p.state is ProcState.DONE and going and not p.slice_stopped:
                p.slice_stopped = True
                self._stop_slice(name)
        except Exception as exc:  # never in the way of the exec's own answers
            self.svc.log.error(f"{p.unit.name}: usage: {exc!r}")

    def slices(self, procs):
        """The accounting slices of ``procs`` (the guard of handed-over units stops them too,
        should no sdexec take the units over)."""
        return {p.accounting_slice for p in procs if p.accounting_slice is not None}

    def answer(self, msg):
        """``sdexec.usage {"jobid"?: f58plain}``: the records of this rank's job shells (all
        processes without ``jobid``), read now for the running ones."""
        from flux_sdexec.adapters.messages import payload_of  # flux's: not in the unit tier

        want = payload_of(msg, "usage").get("jobid")
        procs = []
        for p in list(self.svc.registry):
            plain = job_id(p.cmd.label) or job_id(p.unit.name)
            if want is not None and plain != want:
                continue
            if p.accounting_slice is None:
                continue
            rec = p.usage if p.usage is not None else self._record(p)
            entry = {"unit": p.unit.name, "jobid": plain, "running": p.usage is None}
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

    def _record(self, p):
        wall = time.time() - p.started_at if p.started_at else None
        u = p.unit
        name = p.accounting_slice
        read = self._read(f"{self.parent}/{name}")
        missing = None if self.parent is not None else UNKNOWN_PARENT
        if not u.finished:
            kills = self.oom_log.peek(name) if self.oom_log else None
            return usage.record(self.layout, read, kills, wall, None, None, missing)
        kills = self.oom_log.take(name) if self.oom_log else None
        result, status = u.result or "success", u.wait_status
        return usage.record(self.layout, read, kills, wall, result, status, missing)

    def close(self):
        """Close /dev/kmsg (at unload)."""
        if self.oom_log is not None:
            self.oom_log.close()

    def _finished(self, p):
        p.usage = self._record(p)
        self.svc.log.debug(f"{p.unit.name}: usage {json.dumps(p.usage, sort_keys=True)}")
        plain = job_id(p.cmd.label) or job_id(p.unit.name)
        if plain is not None:
            self._to_job(p, plain)

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
