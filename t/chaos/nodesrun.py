"""The chaos run on the nodes of t/site/nodes.sh (``--nodes``): what inner.py adds there.

- the injector is a NodeInjector (nodefaults.py);
- a keeper thread, every 3 seconds: switches job-exec's method (``--methods``, each for
  ``--method-period`` s, through ``$CHAOS_SET_METHOD METHOD``, which t/site/nodes-chaos.sh
  writes), and keeps drained ranks undrained (drains.py), so that later
  jobs can run there;
- the end checks on every node: units left (each node's own manager), guest processes left in
  its cgroup subtree, the ranks each lost job ran on (for the verdict, nodeverdict.py).
"""

import json
import os
import pwd
import threading
import time

from . import nodeverdict, schedule
from .drains import DrainKeeper
from .drains import run as _run
from .nodefaults import NodeInjector
from .nodes import Nodes

KEEP_TICK = 3.0  # seconds between the keeper's rounds (each runs a flux command or two)
CMD_TIMEOUT = 60
GONE_TIMEOUT = 30  # seconds units and guest processes may take to go once every job is done


class NodeRun:
    """The node parts of one chaos run (see the module docstring)."""

    def __init__(self, args, log):
        self.nodes = Nodes()
        self.methods = args.methods
        self.period = args.method_period
        self.set_method = os.environ["CHAOS_SET_METHOD"]
        self.log = log
        self.drain_keeper = DrainKeeper(log)
        self.feeder = None
        self._method = None
        self._t0 = time.monotonic()
        self._quit = threading.Event()
        self._thread = threading.Thread(target=self._keep, name="keeper", daemon=True)

    def injector(self, plan, brokers, module, checkout):
        return NodeInjector(self.nodes, plan, brokers, module, checkout, self.log)

    def start(self, feeder):
        """Set the first method (before any job), then keep the run going in a thread."""
        self.feeder = feeder
        self._t0 = time.monotonic()
        self._switch_method(0.0)
        self._thread.start()

    def stop(self):
        self._quit.set()
        self._thread.join(CMD_TIMEOUT * 2)
        self.drain_keeper.round()  # the last ones, so that no rank stays drained

    def _keep(self):
        while not self._quit.wait(KEEP_TICK):
            if self.feeder.accepting:
                self._switch_method(time.monotonic() - self._t0)
            self.drain_keeper.round()

    def _switch_method(self, elapsed):
        method = schedule.method_at(elapsed, self.methods, self.period)
        if method == self._method:
            return
        res = _run([self.set_method, method])
        if res.returncode != 0:  # e.g. a broker restarting: tried again at the next round
            self.log(f"[{elapsed:7.1f}s] method {method} not set yet: {res.stderr.strip()}")
            return
        self._method = self.feeder.method = method
        self.log(f"[{elapsed:7.1f}s] method {method}")

    # -- the end checks --

    def hostnames(self):
        return {str(r): self.nodes.hostname(r) for r in range(self.nodes.count)}

    def units_left(self, globs):
        """``nodeN UNIT`` for each unit of ``globs`` left on any node after up to GONE_TIMEOUT."""
        return _settled(
            lambda: [
                f"{self.nodes.hostname(r)} {unit}"
                for r in range(self.nodes.count)
                for unit in self.nodes.units(r, globs)
            ]
        )

    def guest_procs_left(self, guests):
        """Each live process of a guest in any node's cgroup subtree, after up to GONE_TIMEOUT."""
        uids = {pwd.getpwnam(g).pw_uid for g in guests}
        return _settled(
            lambda: [
                f"{self.nodes.hostname(r)} pid {pid}: {cmd}"
                for r in range(self.nodes.count)
                for pid, cmd in self.nodes.procs_of(r, uids)
            ]
        )

    def lost_units(self):
        """The units sdexec ended as lost (their manager restarted), from the instance's log
        (rank 0's log file has every rank's lines, of every broker's life)."""
        try:
            with open(self.nodes.state / "node0" / "flux" / "broker.log") as f:
                return nodeverdict.parse_lost_units(f)
        except OSError as exc:
            self.log(f"chaos: cannot read the instance's log: {exc}")
            return []

    def print_left(self, units):
        for entry in units:
            host, unit = entry.split(" ", 1)
            state = self.nodes.unit_state(int(host[len("node") :]), unit)
            self.log(f"left: {host} {unit} ({state})")

    def add_ranks(self, jobs):
        """Each of ``jobs`` gets ``ranks``: the broker ranks of its R (if it has one)."""
        for job in jobs:
            if job.get("jobid"):
                res = _run(["flux", "job", "info", str(job["jobid"]), "R"])
                try:
                    r_lite = json.loads(res.stdout)["execution"]["R_lite"]
                except (ValueError, KeyError, TypeError):
                    continue
                job["ranks"] = sorted(
                    {r for entry in r_lite for r in nodeverdict.expand_idset(entry["rank"])}
                )


def _settled(listing, timeout=GONE_TIMEOUT):
    """``listing()`` once it is empty, or as it is after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        found = listing()
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.5)
