"""The chaos test's plan, from its seed alone: which faults, in what order, and which jobs.

Pure: no flux, no systemd, no clock. The same seed gives the same fault sequence and the same
job mix; the run then carries out as much of the sequence as its duration allows, so a longer
run with the same seed replays a shorter one's faults first.
"""

import random
from dataclasses import dataclass

# How often each fault kind is drawn, relative to the others. upgrade is the rarest: it holds
# the queue for seconds, and a run of upgrades back to back would test little else.
WEIGHTS = {
    "reexec": 3,  # systemctl --user daemon-reexec
    "reload": 2,  # systemctl --user daemon-reload
    "buskill": 2,  # the session bus (dbus-daemon) SIGKILLed
    "stall": 2,  # systemd SIGSTOPped for a few seconds
    "modstop": 2,  # one rank's sdexec module process SIGSTOPped about a second
    "clientkill": 2,  # a `flux exec --service sdexec` client SIGKILLed mid-run
    "upgrade": 1,  # flux sdexec upgrade
    # node faults, on the nodes of t/site/nodes.sh only (t/site/nodes-chaos.sh)
    "brokerkill": 3,  # a node's broker SIGKILLed, then started again (never rank 0's)
    "managerkill": 3,  # a node's systemd manager SIGKILLed, then started again
}
NODE_KINDS = ("brokerkill", "managerkill")
KINDS = tuple(k for k in WEIGHTS if k not in NODE_KINDS)  # the default of the 2-broker run
# The default on nodes: no upgrade (it refuses to run while bulk-exec jobs run).
NODES_KINDS = tuple(k for k in WEIGHTS if k != "upgrade")
# Once per run, when asked for: systemd stopped for longer than the module's per-call deadline.
LONG_STALL = "longstall"
ALL_KINDS = KINDS + NODE_KINDS + (LONG_STALL,)

# With node faults: the 5th fault of every 10 is a brokerkill, the 10th a managerkill (the
# rest drawn), so that 10 minutes (some 150 faults) hold at least 10 of each.
NODE_FAULT_PERIOD = 10
NODE_FAULT_SLOTS = {4: "brokerkill", 9: "managerkill"}

GAP = (1.0, 3.0)  # seconds between the end of one fault and the start of the next
STALL = (1.5, 5.0)  # seconds systemd stays stopped in a short stall
MODSTOP = (0.5, 1.5)  # seconds the module process stays stopped
CLIENT_LIFE = (0.2, 1.0)  # seconds a client runs (after its command started) before it is killed
BROKER_DOWN = (0.0, 5.0)  # seconds a killed broker stays dead before it is started again
MANAGER_DOWN = (0.0, 3.0)  # seconds a killed manager stays dead before a new one starts

SLEEP_MAX = 1.5  # a job runs `sleep <0..SLEEP_MAX>; exit <0..3>`
SPREAD_MAX = 4.0  # ... and a multi-node job's rank r sleeps r times <0..SPREAD_MAX> more
TWO_NODE_SHARE = 0.3  # share of the jobs that run on both brokers (of 2)
MULTI_NODE_SHARE = 0.6  # with 3 nodes or more: share of the jobs on 2 or more, evenly


@dataclass(frozen=True)
class Fault:
    """One fault: wait ``gap`` seconds, then inject ``kind`` (``arg`` seconds, on ``rank``)."""

    gap: float
    kind: str
    arg: float = 0.0
    rank: int = 0

    def describe(self, every_rank=False):
        """A short line for the log, e.g. ``stall 2.31s`` or ``modstop rank 1 0.80s``; with
        ``every_rank`` (on nodes, where every fault aims at one) the rank whatever the kind."""
        text = self.kind
        if every_rank or self.kind in ("modstop", "clientkill") + NODE_KINDS:
            text += f" rank {self.rank}"
        if self.arg:
            text += f" {self.arg:.2f}s"
        return text


@dataclass(frozen=True)
class JobSpec:
    """One job of the mix: on ``nodes`` brokers, each task runs ``sleep SLEEP; exit CODE``,
    rank r sleeping r times SPREAD more (its ranks end apart, as real jobs' do)."""

    nodes: int
    sleep: float
    code: int
    spread: float = 0.0

    def command(self):
        """The job's command line."""
        apart = (
            f"r=${{FLUX_TASK_RANK:-0}}; while test $r -gt 0; do sleep {self.spread:.2f}; "
            "r=$((r - 1)); done; "
            if self.spread
            else ""
        )
        return ["sh", "-c", f"sleep {self.sleep:.2f}; {apart}exit {self.code}"]


def fault_schedule(seed, count, kinds=KINDS, long_stall=0.0, ranks=2):
    """The first ``count`` faults of ``seed``'s sequence.

    Args:
        seed: the run's seed (an int).
        count: how many faults to plan (the run stops taking them when its time is up).
        kinds: the fault kinds to draw from (a subset of KINDS, in any order).
        long_stall: seconds of the one long systemd stall; 0 plans none. It is fault number
            ``count // 8`` (at least the second): with ``count`` about the run's seconds and
            faults about 2.5 s apart, that is a third of the way into the run.
        ranks: number of brokers (for the faults aimed at one rank; a brokerkill never
            draws rank 0, whose loss would end the instance).

    Returns:
        A list of Fault.

    Raises:
        ValueError: for an unknown kind, no kind at all, or a brokerkill with one broker.
    """
    unknown = sorted(set(kinds) - set(WEIGHTS))
    if unknown:
        raise ValueError(f"unknown fault kind(s) {', '.join(unknown)}; known: {', '.join(WEIGHTS)}")
    chosen = [k for k in WEIGHTS if k in kinds]  # the draw must not depend on the order given
    if not chosen and not long_stall:
        raise ValueError("no fault kind to inject")
    if "brokerkill" in chosen and ranks < 2:
        raise ValueError("brokerkill needs 2 brokers or more: rank 0's is never killed")
    rng = random.Random(f"faults-{seed}")
    long_at = max(1, count // 8) if long_stall else -1
    plan = []
    for i in range(count):
        gap = round(rng.uniform(*GAP), 2)
        if i == long_at or not chosen:
            if i == long_at:
                plan.append(Fault(gap, LONG_STALL, float(long_stall)))
            continue
        kind = rng.choices(chosen, weights=[WEIGHTS[k] for k in chosen])[0]
        forced = NODE_FAULT_SLOTS.get(i % NODE_FAULT_PERIOD)
        if forced in chosen:  # at least one of each node fault in every NODE_FAULT_PERIOD
            kind = forced
        rank = rng.randrange(1, ranks) if kind == "brokerkill" else rng.randrange(ranks)
        arg = {"stall": STALL, "modstop": MODSTOP, "clientkill": CLIENT_LIFE,
               "brokerkill": BROKER_DOWN, "managerkill": MANAGER_DOWN}.get(kind)  # fmt: skip
        plan.append(Fault(gap, kind, round(rng.uniform(*arg), 2) if arg else 0.0, rank))
    return plan


def job_mix(seed, max_nodes=2):
    """``seed``'s endless sequence of JobSpec of 1 to ``max_nodes`` nodes (a generator)."""
    rng, apart = random.Random(f"jobs-{seed}"), random.Random(f"spread-{seed}")
    share = TWO_NODE_SHARE if max_nodes <= 2 else MULTI_NODE_SHARE
    while True:
        draw = rng.random()
        nodes = 1 if draw >= share else 2 + int(draw / share * (max_nodes - 1))
        sleep, code = round(rng.uniform(0.0, SLEEP_MAX), 2), rng.randrange(4)
        spread = round(apart.uniform(0.0, SPREAD_MAX), 2) if nodes > 1 else 0.0
        yield JobSpec(nodes, sleep, code, spread)


def method_at(elapsed, methods, period):
    """The exec method for jobs submitted ``elapsed`` s into the run: each of ``methods`` in
    turn for ``period`` s (``period`` 0: the first one throughout)."""
    if period <= 0:
        return methods[0]
    return methods[int(elapsed // period) % len(methods)]
