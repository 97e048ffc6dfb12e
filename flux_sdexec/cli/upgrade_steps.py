"""The steps of ``flux sdexec upgrade``, and the restore that undoes them.

Every request goes through upgrade_broker.Broker (bounded, interruptible; all ranks at
once where a step asks every rank). What the run changed, or may have changed, is
written down before each request is sent (upgrade_plan.Changes); the restore first
waits for answers still owed, then asks the ranks what they run and acts on that
(upgrade_plan.restore_steps), so a removal whose answer came late is undone too.
"""

import os
import time

from flux_sdexec.cli import upgrade_plan as plan
from flux_sdexec.cli import upgrade_startup as startup
from flux_sdexec.cli.upgrade_broker import Failure, error, say

REASON = "flux sdexec upgrade"
# published once job-exec is loaded again: each sdexec starts the hold of the records it
# adopted (waits.py), which job-exec is now there to collect
JOB_EXEC_LOADED = "sdexec.job-exec-loaded"


class Upgrade:
    """One run of the procedure through ``broker`` (an upgrade_broker.Broker)."""

    def __init__(self, broker, size):
        self.broker = broker
        self.h = broker.h
        self.size = size
        self.changes = plan.Changes()
        self.unsettled = []  # (what, Round) whose answers were not all in when collected
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
        jobs = startup.wait_startup(self.broker, force)
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
        stays in ``unsettled`` (for the restore) until every answer is in."""
        round_ = self.broker.send_each(requests)
        self.unsettled.append((what, round_))
        answers = self.broker.collect(round_, what)
        if not round_.waiting:
            self.unsettled.remove((what, round_))
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
        problems = self.settle()
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
        """Tell every sdexec that job-exec is loaded (JOB_EXEC_LOADED); if that fails, each
        starts its holds with job-exec's first wait there."""
        payload = {"topic": JOB_EXEC_LOADED, "flags": 0}
        try:
            self.broker.call("event.publish", payload, 0, f"publish {JOB_EXEC_LOADED}")
        except Failure as exc:
            say(f"{exc} (each sdexec starts its holds with job-exec's first wait there)")

    def settle(self):
        """Wait (at most the timeout) for the answers still owed; name those still missing."""
        rounds = [r for _, r in self.unsettled]
        self.broker.run(self.broker.timeout, lambda: not any(r.waiting for r in rounds))
        problems = []
        for what, round_ in self.unsettled:
            for key in sorted(round_.waiting):
                rank = round_.answers[key].rank
                problems.append(
                    f"{what} on rank {rank}: still no answer; what it did is unknown "
                    f"(see flux module list on rank {rank})"
                )
            round_.close()
        self.unsettled = []
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
