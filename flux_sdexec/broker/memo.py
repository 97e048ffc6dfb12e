"""Naming in a job's eventlog the constraints its shell runs without: ``job-manager.memo``.

When a constrained job shell runs with a constraint this host's manager never enforces
(``containment.unenforceable``: a device policy on cgroup v2), the job is told with a memo,
``{"sdexec": {"not_enforced": {constraint: reason}}}``, kept in its eventlog (not volatile):
``flux job eventlog`` shows a ``memo`` event and ``flux jobs -o '{user.sdexec.not_enforced}'``
the constraints. The module runs as the instance owner, who may memo any job.

One memo per job per rank: the job ids memoed are remembered, the last REMEMBERED of them.
The RPC goes to the job manager on rank 0 without waiting; its answer is read in the
future's callback (fulfilled by then, so nothing blocks), and a failure (the job is over, no
job manager, a timeout) is logged at debug level: it never fails the exec.
"""

from collections import OrderedDict

from flux_sdexec.core.shelljobs import job_id, job_number

TOPIC = "job-manager.memo"
TIMEOUT = 10.0  # seconds an answer may take before the future fails with ETIMEDOUT
REMEMBERED = 1024  # job ids memoed that are remembered (a rank's jobs, many times over)


class JobMemos:
    """The memos of one sdexec module.

    Args:
        handle: the module's flux handle (``rpc``).
        log: the module's logger.
        watchers: ``broker.watchers.Watchers`` (``guard`` for the future's callback).
    """

    def __init__(self, handle, log, watchers):
        self.h, self.log, self.watchers = handle, log, watchers
        self._memoed = OrderedDict()  # job ids (f58plain) memoed, oldest first
        self._pending = {}  # future -> what it is, for the log; held until answered

    def not_enforced(self, unit, constraints):
        """Tell the job of job shell ``unit`` it runs without ``constraints`` (``{name:
        reason}``), unless it was told already; a unit that is no job's shell is skipped."""
        plain = job_id(unit)
        if plain is None or plain in self._memoed:
            return
        self._memoed[plain] = None
        if len(self._memoed) > REMEMBERED:
            self._memoed.popitem(last=False)
        memo = {"sdexec": {"not_enforced": dict(constraints)}}
        self.post(job_number(plain), memo, f"{unit}: {TOPIC} of {plain}")

    def post(self, jobid, memo, what):
        """Post ``memo`` on job ``jobid`` (its integer id), answered without waiting;
        ``what`` names it in the log, where a failure goes at debug level (the job is
        over, no job manager, a timeout)."""
        payload = {"id": jobid, "volatile": False, "memo": memo}
        future = None
        try:
            future = self.h.rpc(TOPIC, payload, 0)
            self._pending[future] = what  # referenced until answered
            future.then(self.watchers.shield(self._answered, what), timeout=TIMEOUT)
        except Exception as exc:  # never in the way of the exec
            self._pending.pop(future, None)
            self.log.debug(f"{what}: {getattr(exc, 'strerror', None) or exc}")

    def _answered(self, future):
        what = self._pending.pop(future, TOPIC)
        try:
            future.get()
        except OSError as exc:
            self.log.debug(f"{what}: {exc.strerror or exc}")

    def pending(self):
        """How many memos are not answered yet."""
        return len(self._pending)

    def remembered(self):
        """How many job ids are remembered as memoed."""
        return len(self._memoed)

    def close(self):
        """Unload: let go of the futures still out (the handle goes with the module)."""
        self._pending.clear()
