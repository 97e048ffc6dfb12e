"""The decisions of ``flux sdexec upgrade``, apart from the broker: which running jobs
survive a job-exec removal, which hold it up, what each rank must show afterwards, and
the report. Pure: stdlib only (cli/upgrade.py talks to flux); module paths are compared
as the files they resolve to (os.path.realpath), on the node the command runs on.
"""

import os
from dataclasses import dataclass, field

from flux_sdexec.core.values import encode_idset

# job-exec reattaches only these after its reload (RFC 50): a bgexec job shell runs in a
# waitable sdexec unit that outlives job-exec; any other implementation's job shells
# end with job-exec's streams.
REATTACHABLE = frozenset({"bgexec"})


@dataclass(frozen=True)
class Jobs:
    """job-exec's running jobs (its stats-get ``jobs``), sorted out.

    reattachable: ids of bgexec jobs; ending: (id, implementation) of every other job;
    finalizing: ids of jobs whose shells are all done and whose release job-exec has
    yet to send (removed then, job-exec never sends it: the job stays in CLEANUP).
    initializing: ids of jobs job-exec has not yet given an implementation (it is still
    reading their J and R): in their startup window, whatever method they will get.
    """

    reattachable: tuple
    ending: tuple
    finalizing: tuple = ()
    initializing: tuple = ()


def sort_jobs(jobs):
    """``jobs``: job-exec's stats ``jobs`` object ({id: {"implementation": ...}})."""
    reattachable, ending, finalizing, initializing = [], [], [], []
    for jobid, entry in sorted(jobs.items()):
        impl = entry.get("implementation", "none")
        if entry.get("finalizing"):
            finalizing.append(jobid)
        elif impl == "none":
            initializing.append(jobid)
        elif impl in REATTACHABLE:
            reattachable.append(jobid)
        else:
            ending.append((jobid, impl))
    return Jobs(tuple(reattachable), tuple(ending), tuple(finalizing), tuple(initializing))


def in_startup(reattachable, recoverable):
    """The bgexec jobs still in their startup window: no RFC 50 ``recoverable`` event in
    their exec eventlog yet (job-exec would refuse to reattach them)."""
    return [j for j in reattachable if j not in recoverable]


def refusal(jobs, force):
    """Why the upgrade must not go on (a message), or None. Jobs that would end make it
    refuse unless ``force``."""
    if not jobs.ending or force:
        return None
    return (
        "refusing to upgrade: these running jobs would end, since their job shells' "
        f"streams end with job-exec: {describe(jobs.ending)} "
        "(wait for them to finish, or use --force to end them)"
    )


def describe(ending):
    """``id (implementation), ...``."""
    return ", ".join(f"{jobid} ({impl})" for jobid, impl in ending)


def job_exec_args(stats_method, config_method):
    """The arguments job-exec is loaded again with: its method, if it is not the one the
    config would give it (it was loaded with ``method=``)."""
    if stats_method and stats_method != (config_method or "bulk-exec"):
        return [f"method={stats_method}"]
    return []


def rank_problems(expected_path, mods_by_rank, stats_by_rank, resolve=os.path.realpath):
    """What is wrong with the sdexec each rank runs after the reload (a list of texts).

    The broker lists the path sdexec was loaded from as given, the module reports the file
    it resolved: both are compared as the file they ``resolve`` to, so that a module
    reached through a symlink (``/opt/sdexec/current``, versions side by side) passes.

    Args:
        expected_path: the module file asked for.
        mods_by_rank: {rank: the "mods" list of module.list, or an error text}.
        stats_by_rank: {rank: sdexec.stats-get's answer, or an error text}.
        resolve: path -> the file it names (the same file on every node, as installed).
    """
    want = resolve(expected_path)
    problems = []
    for rank in sorted(mods_by_rank):
        mods = mods_by_rank[rank]
        if isinstance(mods, str):
            problems.append(f"rank {rank}: module list failed: {mods}")
            continue
        paths = [m.get("path") for m in mods if m.get("name") == "sdexec"]
        if not paths:
            problems.append(f"rank {rank}: sdexec is not loaded")
        elif resolve(paths[0]) != want:
            problems.append(f"rank {rank}: sdexec runs {paths[0]}, not {expected_path}")
        stats = stats_by_rank.get(rank)
        if isinstance(stats, str):
            problems.append(f"rank {rank}: sdexec does not answer: {stats}")
        elif isinstance(stats, dict) and stats.get("module") is not None:
            if resolve(stats["module"]) != want:
                problems.append(f"rank {rank}: sdexec reports file {stats['module']}")
    return problems


@dataclass
class Changes:
    """What a run has changed, or may have (a request sent whose answer is not in, or
    came late): what a restore must look at before it acts."""

    queues: list = field(default_factory=list)  # stopped, or asked to stop (None: default)
    job_exec_args: list = None  # job-exec's arguments once it is, or may be, removed
    sdexec_ranks: set = field(default_factory=set)  # ranks where sdexec is, or may be, missing


def restore_steps(changes, listed):
    """How to bring service back, from what the ranks list now.

    Args:
        changes: the run's Changes.
        listed: {rank: the names of the modules loaded there (a set), or an error text}
            for every rank of ``changes.sdexec_ranks``, and rank 0 when job-exec may be
            removed.

    Returns:
        (steps, problems): steps in order, ``("load-sdexec", [ranks])``, ``("load-job-exec",
        args)``, ``("start-queues", [names])``, each only if needed; problems: texts.
        A rank that could not be listed gets its load anyway (it is refused if loaded).
    """
    steps, problems = [], []
    for rank in sorted(listed):
        if isinstance(listed[rank], str):
            problems.append(f"rank {rank}: module list failed: {listed[rank]}")

    def loaded(rank, name):
        return not isinstance(listed.get(rank), str) and name in listed.get(rank, ())

    missing = [r for r in sorted(changes.sdexec_ranks) if not loaded(r, "sdexec")]
    if missing:
        steps.append(("load-sdexec", missing))
    if changes.job_exec_args is not None and not loaded(0, "job-exec"):
        steps.append(("load-job-exec", list(changes.job_exec_args)))
    if changes.queues:
        steps.append(("start-queues", list(changes.queues)))
    return steps, problems


@dataclass
class Report:
    """What the upgrade did, for the closing lines."""

    module: str
    ranks: int
    queues: list = field(default_factory=list)  # the queues it stopped and started again
    reattached: list = field(default_factory=list)  # bgexec jobs left running
    ended: list = field(default_factory=list)  # (id, implementation) ended by --force
    waited_startup: float = 0.0  # seconds spent waiting for startup windows to close
    held: float = 0.0  # seconds from the queue stop to the queue start
    versions: dict = field(default_factory=dict)  # rank -> version, when sdexec says
    files: dict = field(default_factory=dict)  # rank -> the file its sdexec says it runs

    def lines(self):
        queues = ", ".join(q or "(default)" for q in self.queues) or "none were started"
        out = [f"sdexec reloaded from {self.module} on {self.ranks} rank(s)"]
        by_file = {}
        for rank, path in sorted(self.files.items()):
            by_file.setdefault(path, []).append(rank)
        for path, ranks in by_file.items():  # what the modules say they run (resolved)
            which = (
                f"ranks {encode_idset(ranks)} run" if len(ranks) > 1 else f"rank {ranks[0]} runs"
            )
            out.append(f"{which} {path}")
        out += [
            f"queues stopped and started again: {queues}",
            f"waited {self.waited_startup:.1f}s for jobs in their startup window",
            f"jobs reattached by job-exec: {len(self.reattached)}"
            + (f" ({', '.join(self.reattached)})" if self.reattached else ""),
        ]
        if self.ended:
            out.append(f"jobs ended (--force): {describe(self.ended)}")
        if self.versions:
            seen = sorted(set(self.versions.values()))
            out.append(f"sdexec version: {', '.join(seen)}")
        out.append(f"scheduling was held for {self.held:.1f}s")
        return out
