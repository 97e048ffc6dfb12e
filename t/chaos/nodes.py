"""The nodes of t/site/nodes.sh as the chaos test reaches them: pids, commands, restarts.

Node N (hostname ``nodeN``, rank N) is a namespace holder process with its own /run: its
systemd manager of the site user, its session bus and its broker. Every process is found by
the pid its pidfile records (with its start time, so a reused pid is never taken for it):
``broker-N.pid`` and ``nodeN/manager.pid`` in the harness's state dir. A node's systemctl and
busctl run in its namespaces through the wrappers t/site/nodes-chaos.sh writes
(``$CHAOS_NODES_WRAP/nodeN/``); restarts go through ``t/site/nodes.sh`` itself.
"""

import os
import pwd
import signal
import subprocess
import time
from pathlib import Path

from . import procs

RESTART_TIMEOUT = 200  # s nodes.sh may take to start a broker or a manager and see it answer
GONE_TIMEOUT = 10  # s a SIGKILLed or SIGTERMed process may take to be gone
CMD_TIMEOUT = 60


class Nodes:
    """The site's nodes, from the environment t/site/nodes-chaos.sh sets."""

    def __init__(self, env=None):
        env = os.environ if env is None else env
        self.state = Path(env["CHAOS_NODES_STATE"])
        self.nodes_sh = env["CHAOS_NODES_SH"]
        self.wrap = Path(env["CHAOS_NODES_WRAP"])
        self.user = pwd.getpwnam(env.get("CHAOS_SITE_USER", "flux"))
        self.count = int((self.state / "nodes").read_text())

    def hostname(self, rank):
        return f"node{rank}"

    def env(self, rank):
        """Our environment with node ``rank``'s systemctl and busctl first on PATH."""
        return dict(os.environ, PATH=f"{self.wrap / self.hostname(rank)}:{os.environ['PATH']}")

    def cgroup(self, rank):
        """Node ``rank``'s cgroup subtree (unified hierarchy), its manager's parent."""
        return Path("/sys/fs/cgroup/unified") / f"sdexec-node{rank}.slice"

    def _manager_cgroup(self, rank):
        uid = self.user.pw_uid
        return self.cgroup(rank) / f"user-{uid}.slice" / f"user@{uid}.service"

    def _pidfile(self, rank, what):
        if what == "broker":
            return self.state / f"broker-{rank}.pid"
        return self.state / self.hostname(rank) / "manager.pid"

    def pid(self, rank, what):
        """The live pid of node ``rank``'s ``what`` (broker or manager), or None."""
        try:
            pid, started = self._pidfile(rank, what).read_text().split()
        except (OSError, ValueError):
            return None
        return int(pid) if _starttime(int(pid)) == started else None

    def _nodes_sh(self, *args):
        res = subprocess.run(
            [self.nodes_sh, *args], capture_output=True, text=True, timeout=RESTART_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        if res.returncode != 0:
            said = (res.stdout + res.stderr).strip().splitlines()[-5:]
            raise RuntimeError(f"nodes.sh {' '.join(args)} exited {res.returncode}: {said}")

    def _kill(self, rank, what):
        """SIGKILL node ``rank``'s ``what`` by its pid; wait until it is gone; forget its
        pidfile (its zombie may linger: the machine's pid 1 reaps late). Returns the pid."""
        pid = self.pid(rank, what)
        if pid is None:
            raise RuntimeError(f"node{rank}'s {what} is not running (no live pid recorded)")
        os.kill(pid, signal.SIGKILL)
        _until(lambda: not procs.alive(pid), GONE_TIMEOUT, f"{what} {pid} alive after SIGKILL")
        self._pidfile(rank, what).unlink()
        return pid

    def kill_broker(self, rank):
        return self._kill(rank, "broker")

    def start_broker(self, rank):
        """Start node ``rank``'s broker again (nodes.sh broker-up), wait until it answers and
        runs sdexec (broker-ready); returns its new pid."""
        self._nodes_sh("broker-up", str(rank))
        self._nodes_sh("broker-ready", str(rank))
        pid = self.pid(rank, "broker")
        if pid is None:
            raise RuntimeError(f"node{rank}'s broker started but records no live pid")
        return pid

    def kill_manager(self, rank):
        """SIGKILL node ``rank``'s systemd manager, then SIGTERM its session bus (found in the
        bus unit's cgroup), as t0113 does; the jobs' processes are left for sdexec to end."""
        pid = self._kill(rank, "manager")
        bus = self._manager_cgroup(rank) / "session.slice" / "dbus.service" / "cgroup.procs"
        try:
            pids = [int(p) for p in bus.read_text().split()]
        except OSError:
            pids = []
        for p in pids:
            try:
                os.kill(p, signal.SIGTERM)
            except ProcessLookupError:
                continue
        _until(lambda: not any(procs.alive(p) for p in pids), GONE_TIMEOUT, "bus alive")
        return pid

    def start_manager(self, rank):
        """Start node ``rank``'s manager again (nodes.sh manager-up waits until it answers)."""
        self._nodes_sh("manager-up", str(rank))
        return self.pid(rank, "manager")

    def units(self, rank, globs):
        """Node ``rank``'s loaded units matching ``globs``."""
        res = subprocess.run(
            ["systemctl", "--user", "list-units", "--all", "--plain", "--no-legend", *globs],
            capture_output=True, text=True, timeout=CMD_TIMEOUT, env=self.env(rank),
        )  # fmt: skip
        return [line.split()[0] for line in res.stdout.splitlines() if line.strip()]

    def unit_state(self, rank, unit):
        res = subprocess.run(
            ["systemctl", "--user", "show", "-p", "ActiveState,SubState,Result", "--value", unit],
            capture_output=True, text=True, timeout=CMD_TIMEOUT, env=self.env(rank),
        )  # fmt: skip
        return " ".join(res.stdout.split())

    def procs_of(self, rank, uids):
        """``[(pid, comm)]`` of the live processes of ``uids`` in node ``rank``'s subtree."""
        found = []
        for path in self.cgroup(rank).rglob("cgroup.procs"):
            try:
                pids = [int(p) for p in path.read_text().split()]
            except OSError:
                continue
            for pid in pids:
                if procs.alive(pid) and _uid(pid) in uids:
                    found.append((pid, " ".join(procs.cmdline(pid))[:80]))
        return found


def _starttime(pid):
    """``pid``'s start time (field 22 of /proc/PID/stat) as text, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _uid(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _until(condition, timeout, message, step=0.1):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise RuntimeError(message)
        time.sleep(step)
