"""gatherbench: a broker module that writes one usage row per rank straight to the KVS.

The prototype of bench/gather_vs_commits.py's variant (b). Loaded on every rank, it
answers the event ``gatherbench.write`` (``{"jobid", "row", "skip", "spread_s"}``): each rank
not in ``skip`` commits its own row (rank r after ``spread_s * r / size`` seconds, as shells
that end apart) as ``job.<id>.sdexec-usage.<rank>``, one commit per rank,
and the KVS merges the concurrent commits. ``gatherbench.times`` (``{"jobid"}``) answers
when this rank saw the event and when its commit was answered (epoch seconds).
"""

import time

import flux.kvs
from flux.brokermod import BrokerModule, event_handler, request_handler
from flux.job import JobID


class GatherBench(BrokerModule):
    """Writes this rank's row on ``gatherbench.write``; keeps when, for the bench."""

    def __init__(self, h, *args):
        super().__init__(h, *args)
        self.rank = h.get_rank()
        self.size = int(h.attr_get("size"))
        self.times = {}  # jobid -> {"event": t, "answered": t, "error": text}
        self.pending = set()  # timers and commit futures kept until they fire

    @event_handler("write")
    def write(self, msg):
        body = msg.payload
        if self.rank in body.get("skip", []):
            self.times[body["jobid"]] = {"event": time.time()}
            return
        delay = body.get("spread_s", 0) * self.rank / self.size
        if delay <= 0:
            self._commit(body)
            return

        def due(*_):
            self.pending.discard(timer)
            self._commit(body)

        timer = self.handle.timer_watcher_create(delay, due)
        self.pending.add(timer)
        timer.start()

    def _commit(self, body):
        """Commit this rank's row now (the time its shell would end)."""
        jobid = body["jobid"]
        seen = self.times[jobid] = {"event": time.time()}
        row = dict(body["row"], rank=self.rank)
        txn = flux.kvs.KVSTxn(self.handle)
        txn.put(f"job.{JobID(jobid).dothex}.sdexec-usage.{self.rank}", row)
        future = txn.commit_async()
        self.pending.add(future)

        def answered(f):
            self.pending.discard(f)
            seen["answered"] = time.time()
            try:
                f.get()
            except OSError as exc:
                seen["error"] = str(exc)

        future.then(answered)

    @request_handler("times")
    def answer_times(self, msg):
        self.handle.respond(msg, self.times.get(msg.payload["jobid"], {}))
