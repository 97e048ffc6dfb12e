"""A job's usage in the job's KVS directory, and its OOM exception.

A job shell's record is written to ``job.<id>.sdexec-usage.<rank>`` by the rank it ran on
(one asynchronous commit, beside the job's other keys: ``flux job info JOBID
sdexec-usage.<rank>``); OOM kills of its unit become a non-fatal job exception of type
``oom``. An adopted job shell's record is looked up first: the sdexec before may have
written it (``broker/accounting.py`` says when). Nothing here blocks or raises into the
caller: a failed commit or exception is logged. flux only inside the methods that talk to
the KVS and job manager.
"""

import errno
import json

from flux_sdexec.core.usage_record import UsageRecord, kvs_dir, kvs_key

OOM_TYPE = "oom"


class JobUsage:
    """The job side of one sdexec's accounting.

    Args:
        handle: the module's flux handle (KVS commits and lookups, job exceptions).
        log: the module's BrokerLogger.
        rank: this broker's rank.
        host: this node's host name.
    """

    def __init__(self, handle, log, rank, host):
        self.h, self.log, self.rank, self.host = handle, log, rank, host
        self.pending = set()  # futures of commits, exceptions and lookups in flight

    def shell_ended(self, plain, unit, usage, memory_max, check=None):
        """Job ``plain``'s (f58plain) shell ``unit`` on this rank ended having used ``usage``
        (a UsageRecord): write it, and raise an ``oom`` exception on the job if it counts
        OOM kills (``memory_max``: the unit's MemoryMax, or None, for the exception's note).

        ``check``, an adopted shell's: look this rank's record up first; the one found is
        kept and nothing is written or raised; none: written as above; a failed lookup
        leaves the KVS alone. Then ``check.settle(record)`` with the usage settled.
        """
        if check is None:
            self._write(plain, unit, usage, memory_max)
            return

        def on_reply(exc, record=None):
            settled = usage
            try:
                if record is not None:
                    settled = UsageRecord.from_json(record)
                    self.log.info(
                        f"{unit}: usage of job {plain} on rank {self.rank} was recorded "
                        "by the sdexec before: kept"
                    )
                elif exc is None or exc.errno == errno.ENOENT:
                    self._write(plain, unit, usage, memory_max)
                else:
                    self.log.error(
                        f"{unit}: usage: cannot tell whether job {plain}'s record is written"
                        f" ({exc.strerror or exc}): left as it is"
                    )
            except Exception as bug:  # the held answers go out all the same
                self.log.error(f"{unit}: usage: {bug!r}")
            check.settle(settled)

        try:
            self._look_up(plain, on_reply)
        except Exception as exc:  # not sent: whether it is written stays unknown
            on_reply(exc if isinstance(exc, OSError) else OSError(errno.EINVAL, repr(exc)))

    def _write(self, plain, unit, usage, memory_max):
        import flux.kvs  # flux's: not in the unit tier
        from flux.job import JobID, job_raise_async

        jobid = JobID(plain)
        txn = flux.kvs.KVSTxn(self.h, kvs_dir(jobid.dothex))
        txn.put(str(self.rank), usage.placed(self.rank, self.host, unit))
        self._hold(flux.kvs.commit_async(self.h, _kvstxn=txn), f"{unit}: usage")
        if usage.oom_kills:
            note = (
                f"rank {self.rank} ({self.host}): {usage.oom_kills} task(s) killed by the OOM "
                f"killer, " + (f"MemoryMax={memory_max}" if memory_max else "no MemoryMax set")
            )
            future = job_raise_async(self.h, jobid, OOM_TYPE, 1, note)
            self._hold(future, f"{unit}: oom exception")

    def _look_up(self, plain, on_reply):
        """Look up this rank's record of job ``plain`` without waiting; from the reactor,
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
