"""``flux sdexec upgrade``: reload sdexec on every rank under running jobs, safely.

Stop scheduling, wait until no bgexec job is in its startup window (RFC 50
``recoverable``), remove job-exec, reload sdexec on every rank, check what each rank
runs, load job-exec, start the queues again. Jobs whose shells would end with job-exec
(bulk-exec) make it refuse, changing nothing, unless ``--force``. On any failure after
the first change, service comes back (job-exec loaded, queues started) and the command
says what went wrong. The decisions are in upgrade_plan.py.
"""

import os
import sys
import time

import flux
import flux.job

from flux_sdexec.cli import upgrade_plan as plan

REASON = "flux sdexec upgrade"


class Failure(Exception):
    """A step failed: the message says which and why."""


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


def say(text):
    print(f"upgrade: {text}", flush=True)


def main(args):
    h = flux.Flux()
    up = Upgrade(h, args.timeout)
    try:
        report = up.run(args.module, args.force)
    except Failure as exc:
        print(f"flux-sdexec: upgrade: {exc}", file=sys.stderr, flush=True)
        for problem in up.restore():
            print(f"flux-sdexec: upgrade: restoring: {problem}", file=sys.stderr, flush=True)
        return 1
    for line in report.lines():
        say(line)
    return 0


class Upgrade:
    """One run of the procedure on handle ``h``; remembers what it changed, for restore()."""

    def __init__(self, h, timeout):
        self.h = h
        self.timeout = timeout
        self.size = int(h.attr_get("size"))
        self.stopped_queues = []  # the queues this run stopped (None: the default queue)
        self.job_exec_args = None  # set once job-exec is removed, until it is loaded again
        self.sdexec_gone = set()  # ranks where sdexec was removed and not loaded again
        self.modules = {}  # "old" and "new" module file, for loading sdexec again

    # ---- the procedure ----

    def run(self, module, force):
        running = self.sdexec_paths()
        old = running[0]
        module = os.path.abspath(module) if module else old
        if not os.path.isfile(module):
            raise Failure(f"no such module file: {module} (nothing was changed)")
        self.modules = {"new": module, "old": old}
        stats = self.call("job-exec.stats-get", {}, 0, "job-exec stats")
        jobs = plan.sort_jobs(stats.get("jobs", {}))
        why = plan.refusal(jobs, force)
        if why:
            raise_refusal(why)
        if jobs.ending:
            say(f"--force: these jobs will end: {plan.describe(jobs.ending)}")
        report = plan.Report(module=module, ranks=self.size, ended=list(jobs.ending))
        config_method = self.call("config.get", {}, 0, "config").get("exec", {}).get("method")
        args = plan.job_exec_args(stats.get("method"), config_method)

        held_from = time.monotonic()
        self.stop_queues()
        report.queues = list(self.stopped_queues)
        say(f"scheduling stopped ({len(self.stopped_queues)} queue(s))")
        waited_from = time.monotonic()
        jobs = self.wait_startup(force)
        report.waited_startup = time.monotonic() - waited_from
        report.reattached = list(jobs.reattachable)
        report.ended = sorted(set(report.ended) | set(jobs.ending))

        self.call("module.remove", {"name": "job-exec", "cancel": False}, 0, "remove job-exec")
        self.job_exec_args = args
        say("job-exec removed")
        self.reload_sdexec(module)
        problems, versions = self.check_ranks(module)
        if problems:
            raise Failure("after the reload: " + "; ".join(problems))
        report.versions = versions
        say(f"sdexec reloaded and checked on {self.size} rank(s)")
        self.load_job_exec()
        say("job-exec loaded")
        self.start_queues()
        report.held = time.monotonic() - held_from
        return report

    def sdexec_paths(self):
        """The file sdexec was loaded from, on each rank (a list by rank); every rank
        must run it before anything changes."""
        paths = []
        for rank in range(self.size):
            mods = self.call("module.list", None, rank, f"module list on rank {rank}")["mods"]
            found = [m["path"] for m in mods if m.get("name") == "sdexec"]
            if not found:
                raise Failure(f"sdexec is not loaded on rank {rank} (nothing was changed)")
            paths.append(found[0])
        return paths

    def queues(self):
        """Every queue name; [None] when only the default (anonymous) queue exists."""
        names = self.call("job-manager.queue-list", {}, 0, "queue list").get("queues", [])
        return names or [None]

    def stop_queues(self):
        for name in self.queues():
            status = self.call("job-manager.queue-status", named(name), 0, "queue status")
            if not status.get("start"):
                continue
            payload = {"start": False, "all": False, "nocheckpoint": True, "reason": REASON}
            self.call("job-manager.queue-start", {**payload, **named(name)}, 0, "queue stop")
            self.stopped_queues.append(name)

    def start_queues(self):
        while self.stopped_queues:
            name = self.stopped_queues[0]
            payload = {"start": True, "all": False, **named(name)}
            self.call("job-manager.queue-start", payload, 0, "queue start")
            self.stopped_queues.pop(0)

    def wait_startup(self, force):
        """Wait (at most the timeout in all) until no bgexec job lacks its ``recoverable``
        event and none is being finalized or initialized; return job-exec's jobs as they
        are then (the removal follows at once)."""
        deadline = time.monotonic() + self.timeout
        recoverable = set()
        while True:
            stats = self.call("job-exec.stats-get", {}, 0, "job-exec stats")
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
                    names = ", ".join(unsettled)
                    raise Failure(f"jobs still finalizing or initializing: {names}")
                time.sleep(0.05)
                continue
            say(f"waiting for {len(pending)} job(s) in their startup window: {', '.join(pending)}")
            for jobid in pending:
                left = deadline - time.monotonic()
                if left <= 0 or not self.wait_recoverable(jobid, left):
                    raise Failure(
                        f"jobs still in their startup window after {self.timeout:g}s: "
                        + ", ".join(plan.in_startup(pending, recoverable))
                    )
                recoverable.add(jobid)  # recoverable, or over: it holds nothing up

    def wait_recoverable(self, jobid, seconds):
        """Watch the exec eventlog of ``jobid`` until ``recoverable`` or its end (True), or
        ``seconds`` pass (False)."""
        h, state = self.h, {"done": False}

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
            h.reactor_stop()

        future = flux.job.event_watch_async(
            h, flux.job.JobID(jobid), eventlog="guest.exec.eventlog"
        )
        future.then(on_event)
        timer = h.timer_watcher_create(seconds, lambda *args: h.reactor_stop()).start()
        h.reactor_run()
        timer.stop()
        finished = state["done"]
        if not finished:
            state["done"] = True
            future.cancel(stop=False)
        return finished

    def reload_sdexec(self, module):
        """module.remove then module.load of sdexec on every rank at once."""
        h = self.h
        removes = {r: h.rpc("module.remove", {"name": "sdexec"}, nodeid=r) for r in self.ranks()}
        errors = []
        for rank, future in removes.items():
            try:
                self.get(future, f"remove sdexec on rank {rank}")
                self.sdexec_gone.add(rank)
            except Failure as exc:
                errors.append(str(exc))
        payload = load_payload(module)
        loads = {r: h.rpc("module.load", payload, nodeid=r) for r in sorted(self.sdexec_gone)}
        for rank, future in loads.items():
            try:
                self.get(future, f"load {module} on rank {rank}")
                self.sdexec_gone.discard(rank)
            except Failure as exc:
                errors.append(str(exc))
        if errors:
            raise Failure("; ".join(errors))

    def check_ranks(self, module):
        """What each rank runs now: (problems, {rank: version})."""
        mods, stats, versions = {}, {}, {}
        for rank in self.ranks():
            try:
                mods[rank] = self.call("module.list", None, rank, "module list")["mods"]
            except Failure as exc:
                mods[rank] = str(exc)
            try:
                stats[rank] = self.call("sdexec.stats-get", {}, rank, "sdexec stats")
            except Failure as exc:
                stats[rank] = str(exc)
            if isinstance(stats[rank], dict) and stats[rank].get("version"):
                versions[rank] = str(stats[rank]["version"])
        return plan.rank_problems(module, mods, stats), versions

    def load_job_exec(self):
        payload = {"path": "job-exec", "args": self.job_exec_args or [], "exec": False}
        self.call("module.load", payload, 0, "load job-exec")
        self.job_exec_args = None

    # ---- bringing service back ----

    def restore(self):
        """Undo what is still undone (sdexec missing, job-exec removed, queues stopped);
        return what could not be restored."""
        problems = []
        for rank in sorted(self.sdexec_gone):
            errors = []
            for path in dict.fromkeys((self.modules["old"], self.modules["new"])):
                try:
                    self.call("module.load", load_payload(path), rank, f"load {path}")
                except Failure as exc:
                    errors.append(str(exc))
                    continue
                self.sdexec_gone.discard(rank)
                restored(f"sdexec loaded from {path} on rank {rank}")
                break
            else:
                problems += [f"rank {rank}: {e}" for e in errors]
        steps = []
        if self.job_exec_args is not None:
            steps.append(("job-exec loaded", self.load_job_exec))
        if self.stopped_queues:
            steps.append(("queues started", self.start_queues))
        for what, step in steps:
            try:
                step()
                restored(what)
            except Failure as exc:
                problems.append(str(exc))
        return problems

    # ---- RPCs, each bounded ----

    def ranks(self):
        return range(self.size)

    def call(self, topic, payload, nodeid, what):
        return self.get(self.h.rpc(topic, payload, nodeid=nodeid), what)

    def get(self, future, what):
        try:
            future.wait_for(self.timeout)
            return future.get() or {}
        except TimeoutError:
            raise Failure(f"{what}: no answer within {self.timeout:g}s") from None
        except OSError as exc:
            text = future.error_string() or exc.strerror or str(exc)
            raise Failure(f"{what}: {text}") from None


def restored(what):
    print(f"flux-sdexec: upgrade: restored: {what}", file=sys.stderr, flush=True)


def named(name):
    return {"name": name} if name else {}


def load_payload(path):
    return {"path": path, "args": [], "exec": False}


def raise_refusal(why):
    raise Failure(why + "; nothing was changed")
