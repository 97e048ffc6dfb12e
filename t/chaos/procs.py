"""Finding the processes the chaos test may disturb, always by pid, never by name.

- the systemd user manager and the session bus: the bus says which pid owns
  ``org.freedesktop.systemd1`` and ``org.freedesktop.DBus``;
- a rank's sdexec module: flux 0.88 runs a Python broker module in its own process
  (``flux-module-python-exec.py PATH`` under ``py-runner.py``), a child of its broker; the
  module is the child of that broker's pid whose last argument is the module's path.
"""

import os
import signal
import subprocess

CALL_TIMEOUT = 10  # seconds any probe below may take


def bus_owner_pid(name, env=None):
    """The pid owning bus ``name`` on the session bus (busctl on the PATH of ``env``, by
    default ours), or None if the bus does not say."""
    try:
        out = subprocess.run(
            [
                "busctl",
                "--user",
                "call",
                "org.freedesktop.DBus",
                "/org/freedesktop/DBus",
                "org.freedesktop.DBus",
                "GetConnectionUnixProcessID",
                "s",
                name,
            ],
            capture_output=True,
            text=True,
            timeout=CALL_TIMEOUT,
            env=env,
        ).stdout.split()
    except subprocess.TimeoutExpired:
        return None
    return int(out[1]) if len(out) == 2 and out[0] == "u" else None


def manager_pid(env=None):
    """The systemd user manager's pid (None: the bus did not answer)."""
    return bus_owner_pid("org.freedesktop.systemd1", env)


def bus_pid(env=None):
    """The session bus daemon's pid (None: the bus did not answer)."""
    return bus_owner_pid("org.freedesktop.DBus", env)


def bus_answers(env=None):
    """The session bus answers a Ping (a connection also re-activates it via dbus.socket)."""
    try:
        return (
            subprocess.run(
                [
                    "busctl",
                    "--user",
                    "call",
                    "org.freedesktop.DBus",
                    "/org/freedesktop/DBus",
                    "org.freedesktop.DBus.Peer",
                    "Ping",
                ],
                capture_output=True,
                timeout=CALL_TIMEOUT,
                env=env,
            ).returncode
            == 0
        )
    except subprocess.TimeoutExpired:
        return False


def children(pid):
    """The pids of ``pid``'s children (empty if it is gone)."""
    kids = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids += [int(k) for k in f.read().split()]
    except OSError:
        pass
    return kids


def cmdline(pid):
    """``pid``'s argv (empty if it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def module_pid(broker_pid, module_path):
    """The pid of the module process running ``module_path`` under ``broker_pid``, or None."""
    for kid in children(broker_pid):
        argv = cmdline(kid)
        if argv and argv[-1] == module_path and any("module-python-exec" in a for a in argv):
            return kid
    return None


def rss_kb(pid):
    """``pid``'s resident set size in kB, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def alive(pid):
    """``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class Stopper:
    """SIGSTOPs processes and remembers them, so that ``cont_all`` can always SIGCONT them."""

    def __init__(self):
        self.stopped = set()

    def stop(self, pid):
        """SIGSTOP ``pid`` (remembered before the signal, so it is never left stopped)."""
        self.stopped.add(pid)
        os.kill(pid, signal.SIGSTOP)

    def cont(self, pid):
        """SIGCONT ``pid`` (gone already: nothing to do)."""
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        self.stopped.discard(pid)

    def cont_all(self):
        """SIGCONT every process still stopped."""
        for pid in list(self.stopped):
            self.cont(pid)
