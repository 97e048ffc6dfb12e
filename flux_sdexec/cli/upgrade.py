"""``flux sdexec upgrade``: reload sdexec on every rank under running jobs, safely.

Stop scheduling, wait until no bgexec job is in its startup window (RFC 50
``recoverable``), remove job-exec, reload sdexec on every rank, check what each rank
runs, load job-exec, start the queues again. Jobs whose shells would end with job-exec
(bulk-exec) make it refuse, changing nothing, unless ``--force``. However the run ends
after the first change (a failed step, Ctrl-C, SIGTERM or SIGHUP, an unexpected error),
service comes back (sdexec and job-exec loaded, queues started) and the command says what
went wrong. The decisions are in upgrade_plan.py; this file reads top to bottom:

- The way to the broker (``Broker``): every wait on the reactor, bounded, and stoppable.
  Requests go out in rounds (cli/ask.py), to one rank or to all at once, and are
  collected on the reactor until ``timeout``. SIGINT, SIGTERM and SIGHUP only take note
  and stop the reactor: the procedure then raises Interrupted at its next wait, and the
  restore that follows (``restoring``) is not cut short by them. Also the command's
  progress lines (``say``). No blocking ``future.get()``: flux turns SIGINT back to its
  default action while one blocks, which would end the command without bringing service
  back.
- The steps (``Upgrade``), and the restore that undoes them. Every request goes through
  the Broker (all ranks at once where a step asks every rank). What the run changed, or
  may have changed, is written down before each request is sent (upgrade_plan.Changes);
  the restore first waits for answers still owed, then asks the ranks what they run and
  acts on that (upgrade_plan.restore_steps), so a removal whose answer came late is
  undone too.
- The wait for jobs in their startup window (``wait_startup``): job-exec refuses to
  reattach a bgexec job whose exec eventlog has no ``recoverable`` event yet, and a job
  being finalized when job-exec is removed never gets its release: the removal waits
  until neither is left. Every wait goes through the Broker.
- The command: its parser (``register``) and ``main``.
"""

import os
import signal
import sys
import time

import flux
import flux.constants
import flux.job

from flux_sdexec.cli import upgrade_plan as plan
from flux_sdexec.core.handoff import JOB_EXEC_LOADED
from flux_sdexec.cli.ask import Round, run_reactor

# ---- the way to the broker ----

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def say(text):
    """One line of the command's progress, on stdout."""
    emit(f"upgrade: {text}", sys.stdout)


def error(text):
    """One line of what went wrong or was restored, on stderr."""
    emit(f"flux-sdexec: upgrade: {text}", sys.stderr)


def emit(line, stream):
    """Print ``line``; a terminal gone (the SIGHUP of a closed session) must not stop the
    restore, so a failed write is dropped."""
    try:
        print(line, file=stream, flush=True)
    except OSError:
        pass


class Failure(Exception):
    """A step failed: the message says which and why."""


class Interrupted(Failure):
    """A signal asked the command to stop."""

    def __init__(self, signum):
        self.signum = signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")


class Broker:
    """Bounded, interruptible requests on handle ``h``; ``timeout`` bounds each wait."""

    def __init__(self, h, timeout):
        self.h = h
        self.timeout = timeout
        self.signals = []  # signals received, in order
        self.restoring = False  # set once bringing service back: signals no longer stop
        self._wake = None

    # ---- signals ----

    def catch_signals(self):
        """From now on SIGINT, SIGTERM and SIGHUP are noted and stop the reactor."""
        r, w = os.pipe()
        for fd in (r, w):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(w)
        for signum in SIGNALS:
            signal.signal(signum, lambda signum, frame: self.signals.append(signum))
        self._wake = self.h.fd_watcher_create(r, self._woken, events=flux.constants.FLUX_POLLIN)
        self._wake.start()

    def _woken(self, handle, watcher, fd, revents, args):
        try:
            os.read(fd, 64)
        except BlockingIOError:
            pass
        if self.signals and not self.restoring:
            self.h.reactor_stop()

    def check(self):
        """Raise Interrupted if a signal came (not while restoring)."""
        if self.signals and not self.restoring:
            raise Interrupted(self.signals[0])

    def run(self, seconds, done):
        """Run the reactor until ``done()``, ``seconds`` pass, or a signal stops it."""
        stopped = lambda: done() or (bool(self.signals) and not self.restoring)  # noqa: E731
        while True:
            try:
                run_reactor(self.h, seconds, stopped)
                break
            except KeyboardInterrupt:  # flux's own SIGINT watcher, inside reactor_run
                self.signals.append(signal.SIGINT)
        self.check()

    def pause(self, seconds):
        self.run(seconds, lambda: False)

    # ---- requests ----

    def send_each(self, requests):
        """A Round with ``{rank: (topic, payload)}`` sent at once (keyed by rank)."""
        round_ = Round(self.h)
        for rank, (topic, payload) in requests.items():
            round_.send(rank, topic, payload, rank)
        return round_

    def collect(self, round_, what):
        """Wait (at most the timeout) for ``round_``'s answers: {rank: payload or Failure}."""
        self.check()
        self.run(self.timeout, lambda: not round_.waiting)
        return {
            key: outcome(a, f"{what} on rank {a.rank}", self.timeout)
            for key, a in round_.answers.items()
        }

    def ask(self, topic, payload, ranks, what):
        """``topic`` to every rank of ``ranks`` at once: {rank: payload or Failure}."""
        round_ = self.send_each({rank: (topic, payload) for rank in ranks})
        answers = self.collect(round_, what)
        round_.close()
        return answers

    def call(self, topic, payload, rank, what):
        """One request; its payload (a dict), or Failure."""
        answer = self.ask(topic, payload, [rank], what)[rank]
        if isinstance(answer, Failure):
            raise answer
        return answer


def outcome(answer, what, timeout):
    """An Answer as its payload (a dict), or a Failure saying what went wrong."""
    if answer.error is not None:
        return Failure(f"{what}: {answer.error[1]}")
    if answer.payload is None:
        return Failure(f"{what}: no answer within {timeout:g}s")
    return answer.payload or {}


# ---- the steps ----

REASON = "flux sdexec upgrade"


class Upgrade:
    """One run of the procedure through ``broker`` (a Broker)."""

    def __init__(self, broker, size):
        self.broker = broker
        self.h = broker.h
        self.size = size
        self.changes = plan.Changes()
        self.owed = []  # (what, Round) whose answers were not all in when collected
        self.modules = {}  # "old" and "new" module file, for loading sdexec again
        self.reloaded = False  # sdexec was removed somewhere: its records need announce()

    # ---- the procedure ----

    def run(self, module, force):
        old = self.sdexec_paths()[0]
        module = os.path.abspath(module) if module else old
        if not os.path.isfile(module):
            raise Failure(f"no such module file: {module} (nothing was changed)")
        self.modules = {"new": module, "old": old}
        stats = self.broker.call("job-exec.stats-get", {}, 0, "job-exec stats")
        jobs = plan.sort_jobs(stats.get("jobs", {}))
        why = plan.refusal(jobs, force)
        if why:
            raise Failure(why + "; nothing was changed")
        if jobs.ending:
            say(f"--force: these jobs will end: {plan.describe(jobs.ending)}")
        report = plan.Report(module=module, ranks=self.size, ended=list(jobs.ending))
        config = self.broker.call("config.get", {}, 0, "config")
        args = plan.job_exec_args(stats.get("method"), config.get("exec", {}).get("method"))

        held_from = time.monotonic()
        report.queues = self.stop_queues()
        say(f"scheduling stopped ({len(report.queues)} queue(s))")
        waited_from = time.monotonic()
        jobs = wait_startup(self.broker, force)
        report.waited_startup = time.monotonic() - waited_from
        report.reattached = list(jobs.reattachable)
        report.ended = sorted(set(report.ended) | set(jobs.ending))

        self.changes.job_exec_args = args  # from here it may be gone
        self.request_one("module.remove", {"name": "job-exec", "cancel": False}, "remove job-exec")
        say("job-exec removed")
        self.reload_sdexec(module)
        problems, versions, files = self.check_ranks(module)
        if problems:
            raise Failure("after the reload: " + "; ".join(problems))
        report.versions, report.files = versions, files
        say(f"sdexec reloaded and checked on {self.size} rank(s)")
        self.request_one("module.load", job_exec_payload(args), "load job-exec")
        self.changes.job_exec_args = None
        say("job-exec loaded")
        self.announce()
        self.start_queues()
        report.held = time.monotonic() - held_from
        return report

    def request(self, requests, what):
        """Send ``{rank: (topic, payload)}`` at once: {rank: payload or Failure}. The round
        stays in ``owed`` (for the restore) until every answer is in."""
        round_ = self.broker.send_each(requests)
        self.owed.append((what, round_))
        answers = self.broker.collect(round_, what)
        if not round_.waiting:
            self.owed.remove((what, round_))
        return answers

    def request_one(self, topic, payload, what):
        """One request to rank 0 through request(); its payload, or Failure."""
        answer = self.request({0: (topic, payload)}, what)[0]
        if isinstance(answer, Failure):
            raise answer
        return answer

    def sdexec_paths(self):
        """The file sdexec was loaded from, on each rank (a list by rank); every rank
        must run it before anything changes."""
        lists = self.broker.ask("module.list", None, range(self.size), "module list")
        paths = []
        for rank, answer in sorted(lists.items()):
            if isinstance(answer, Failure):
                raise Failure(f"{answer} (nothing was changed)")
            found = [m["path"] for m in answer.get("mods", []) if m.get("name") == "sdexec"]
            if not found:
                raise Failure(f"sdexec is not loaded on rank {rank} (nothing was changed)")
            paths.append(found[0])
        return paths

    def stop_queues(self):
        names = self.broker.call("job-manager.queue-list", {}, 0, "queue list").get("queues")
        for name in names or [None]:
            status = self.broker.call("job-manager.queue-status", named(name), 0, "queue status")
            if not status.get("start"):
                continue
            self.changes.queues.append(name)  # from here it may be stopped
            payload = {"start": False, "all": False, "nocheckpoint": True, "reason": REASON}
            self.broker.call("job-manager.queue-start", {**payload, **named(name)}, 0, "queue stop")
        return list(self.changes.queues)

    def start_queues(self):
        while self.changes.queues:
            payload = {"start": True, "all": False, **named(self.changes.queues[0])}
            self.broker.call("job-manager.queue-start", payload, 0, "queue start")
            self.changes.queues.pop(0)

    def reload_sdexec(self, module):
        """module.remove then module.load of sdexec on every rank at once."""
        ranks = list(range(self.size))
        self.changes.sdexec_ranks = set(ranks)  # from here it may be gone
        self.reloaded = True
        removes = self.request(
            {r: ("module.remove", {"name": "sdexec"}) for r in ranks}, "remove sdexec"
        )
        removed = [r for r in ranks if not isinstance(removes[r], Failure)]
        loads = self.request(
            {r: ("module.load", load_payload(module)) for r in removed}, f"load {module}"
        )
        self.changes.sdexec_ranks -= {r for r in removed if not isinstance(loads[r], Failure)}
        errors = failures(removes) + failures(loads)
        if errors:
            raise Failure("; ".join(errors))

    def check_ranks(self, module):
        """What each rank runs now: (problems, {rank: version}, {rank: the file its sdexec
        reports}). Both questions go to every rank at once."""
        ranks = range(self.size)
        lists = self.broker.send_each({r: ("module.list", None) for r in ranks})
        stats = self.broker.send_each({r: ("sdexec.stats-get", {}) for r in ranks})
        lists = self.broker.collect(lists, "module list")
        stats = self.broker.collect(stats, "sdexec stats")
        mods = {
            r: str(a) if isinstance(a, Failure) else a.get("mods", []) for r, a in lists.items()
        }
        stats = {r: str(a) if isinstance(a, Failure) else a for r, a in stats.items()}
        versions = {
            r: str(s["version"])
            for r, s in stats.items()
            if isinstance(s, dict) and s.get("version")
        }
        files = {
            r: str(s["module"]) for r, s in stats.items() if isinstance(s, dict) and s.get("module")
        }
        return plan.rank_problems(module, mods, stats), versions, files

    # ---- bringing service back ----

    def restore(self):
        """Undo what is, or may be, still undone (sdexec missing, job-exec removed, queues
        stopped), after the answers still owed; return what could not be restored."""
        self.broker.restoring = True
        problems = self.await_owed()
        ranks = set(self.changes.sdexec_ranks)
        if self.changes.job_exec_args is not None:
            ranks.add(0)
        lists = self.broker.ask("module.list", None, sorted(ranks), "module list") if ranks else {}
        listed = {
            r: str(a) if isinstance(a, Failure) else {m.get("name") for m in a.get("mods", [])}
            for r, a in lists.items()
        }
        steps, found = plan.restore_steps(self.changes, listed)
        problems += found
        actions = {
            "load-sdexec": self.restore_sdexec,
            "load-job-exec": self.restore_job_exec,
            "start-queues": self.restore_queues,
        }
        job_exec_up = True
        for step, arg in steps:
            try:
                actions[step](arg)
            except Failure as exc:
                problems.append(str(exc))
                job_exec_up = job_exec_up and step != "load-job-exec"
        if self.reloaded and job_exec_up:
            self.announce()
        return problems

    def announce(self):
        """Tell every sdexec that job-exec is loaded (handoff.JOB_EXEC_LOADED); if that
        fails, each starts its holds with job-exec's first wait there."""
        payload = {"topic": JOB_EXEC_LOADED, "flags": 0}
        try:
            self.broker.call("event.publish", payload, 0, f"publish {JOB_EXEC_LOADED}")
        except Failure as exc:
            say(f"{exc} (each sdexec starts its holds with job-exec's first wait there)")

    def await_owed(self):
        """Wait (at most the timeout) for the answers still owed; name those still missing."""
        rounds = [r for _, r in self.owed]
        self.broker.run(self.broker.timeout, lambda: not any(r.waiting for r in rounds))
        problems = []
        for what, round_ in self.owed:
            for key in sorted(round_.waiting):
                rank = round_.answers[key].rank
                problems.append(
                    f"{what} on rank {rank}: still no answer; what it did is unknown "
                    f"(see flux module list on rank {rank})"
                )
            round_.close()
        self.owed = []
        return problems

    def restore_sdexec(self, ranks):
        """Load sdexec where it is missing: the old file, else the new one."""
        errors = {}
        for path in dict.fromkeys((self.modules["old"], self.modules["new"])):
            answers = self.request(
                {r: ("module.load", load_payload(path)) for r in ranks}, f"load {path}"
            )
            for rank, answer in answers.items():
                if isinstance(answer, Failure):
                    errors.setdefault(rank, []).append(str(answer))
                else:
                    errors.pop(rank, None)
                    restored(f"sdexec loaded from {path} on rank {rank}")
            ranks = sorted(errors)
            if not ranks:
                return
        raise Failure("; ".join(e for rank in sorted(errors) for e in errors[rank]))

    def restore_job_exec(self, args):
        self.request_one("module.load", job_exec_payload(args), "load job-exec")
        restored("job-exec loaded")

    def restore_queues(self, names):
        self.start_queues()
        restored("queues started")


def failures(answers):
    return [str(a) for _, a in sorted(answers.items()) if isinstance(a, Failure)]


def restored(what):
    error(f"restored: {what}")


def named(name):
    return {"name": name} if name else {}


def load_payload(path):
    return {"path": path, "args": [], "exec": False}


def job_exec_payload(args):
    return {"path": "job-exec", "args": args or [], "exec": False}


# ---- the wait for startup windows ----


def wait_startup(broker, force):
    """Wait (at most the timeout in all) until no bgexec job lacks its ``recoverable``
    event and none is being finalized or initialized; return job-exec's jobs as they
    are then (the removal follows at once)."""
    deadline = time.monotonic() + broker.timeout
    recoverable = set()
    while True:
        stats = broker.call("job-exec.stats-get", {}, 0, "job-exec stats")
        jobs = plan.sort_jobs(stats.get("jobs", {}))
        why = plan.refusal(jobs, force)
        if why:
            raise Failure(why.replace("refusing to upgrade", "a job started meanwhile"))
        pending = plan.in_startup(jobs.reattachable, recoverable)
        unsettled = jobs.finalizing + jobs.initializing
        if not pending and not unsettled:
            return jobs
        if not pending:  # a job being released or set up: a moment, then look again
            if time.monotonic() >= deadline:
                raise Failure(f"jobs still finalizing or initializing: {', '.join(unsettled)}")
            broker.pause(0.05)
            continue
        say(f"waiting for {len(pending)} job(s) in their startup window: {', '.join(pending)}")
        for jobid in pending:
            left = deadline - time.monotonic()
            if left <= 0 or not wait_recoverable(broker, jobid, left):
                raise Failure(
                    f"jobs still in their startup window after {broker.timeout:g}s: "
                    + ", ".join(plan.in_startup(pending, recoverable))
                )
            recoverable.add(jobid)  # recoverable, or over: it holds nothing up


def wait_recoverable(broker, jobid, seconds):
    """Watch the exec eventlog of ``jobid`` until ``recoverable`` or its end (True), or
    ``seconds`` pass (False)."""
    state = {"done": False}

    def on_event(future):
        if state["done"]:
            return
        try:
            event = future.get_event()
        except OSError:
            event = None  # no such job any more: over
        if event is not None and event.name not in ("recoverable", "done", "complete"):
            return
        state["done"] = True
        if event is not None:
            future.cancel(stop=False)
        broker.h.reactor_stop()

    future = flux.job.event_watch_async(
        broker.h, flux.job.JobID(jobid), eventlog="guest.exec.eventlog"
    )
    future.then(on_event)
    try:
        broker.run(seconds, lambda: state["done"])
    finally:
        finished = state["done"]
        if not finished:
            state["done"] = True
            future.cancel(stop=False)
    return finished


# ---- the command ----


def register(subparsers):
    """Add the subcommand's parser."""
    sub = subparsers.add_parser(
        "upgrade",
        help="reload sdexec on every rank under running jobs",
        description="Reload sdexec on every rank while jobs run: stop scheduling, wait for "
        "jobs in their startup window, remove job-exec, reload sdexec, check every rank, "
        "load job-exec, start scheduling again.",
    )
    sub.add_argument(
        "--module",
        metavar="PATH",
        help="the sdexec module file to load (default: the file the running one came from)",
    )
    sub.add_argument(
        "--force",
        action="store_true",
        help="go on even though running jobs (bulk-exec) would end, and say which",
    )
    sub.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="bound of every wait, and of the whole wait for startup windows (default 120)",
    )
    sub.set_defaults(func=main)


def main(args):
    """Run the upgrade; on any end but success, restore service. Exit status: 0, 1 for a
    failure, 128 + the signal's number when interrupted."""
    broker = Broker(flux.Flux(), args.timeout)
    broker.catch_signals()
    up = Upgrade(broker, int(broker.h.attr_get("size")))
    try:
        report = up.run(args.module, args.force)
    except BaseException as exc:  # every way out restores service
        error(describe(exc))
        try:
            problems = up.restore()
        except Exception as bug:  # say so, rather than a traceback instead of the rest
            problems = [f"internal error: {bug!r}"]
        for problem in problems:
            error(f"restoring: {problem}")
        if isinstance(exc, Interrupted):
            return 128 + exc.signum
        if isinstance(exc, KeyboardInterrupt):
            return 128 + signal.SIGINT
        return 1
    for line in report.lines():
        say(line)
    return 0


def describe(exc):
    """What went wrong, in one line."""
    if isinstance(exc, Failure):
        return str(exc)
    if isinstance(exc, KeyboardInterrupt):
        return str(Interrupted(signal.SIGINT))
    if isinstance(exc, OSError):
        return f"{exc.strerror or exc}"
    return f"internal error: {exc!r}"
