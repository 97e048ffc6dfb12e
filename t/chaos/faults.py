"""Carrying out the fault schedule, one fault at a time, in a thread beside the job feeder.

Uses no flux handle (the feeder's is not shared across threads): only commands, /proc and
signals, on processes found by pid (procs.py). Every SIGSTOP is followed by its SIGCONT in a
``finally``, and ``Injector.stopper.cont_all()`` is the caller's last resort.
"""

import os
import signal
import subprocess
import tempfile
import threading
import time

from . import procs
from .schedule import ALL_KINDS

CMD_TIMEOUT = 60  # seconds a systemctl call may take (it may meet a stalled or reexecuting systemd)
UPGRADE_TIMEOUT = 300  # seconds flux sdexec upgrade may take
AFTER_BUSKILL_TIMEOUT = 180  # seconds systemd may take to answer again after the bus kill
BUS_BACK_TIMEOUT = 30  # seconds the session bus may take to come back after its kill


class Injector:
    """Injects the faults of a schedule until told to stop; counts them per kind.

    Args:
        plan: the list of schedule.Fault to carry out, in order.
        brokers: ``{rank: broker pid}``.
        module_path: the sdexec module file the brokers run (finds its processes).
        srcdir: the checkout (its cmd/ holds flux-sdexec.py, its t/ start-user-systemd.sh).
        log: a function printing one line.
    """

    def __init__(self, plan, brokers, module_path, srcdir, log):
        self.plan = plan
        self.brokers = brokers
        self.module_path = module_path
        self.srcdir = srcdir
        self.log = log
        self.stopper = procs.Stopper()
        self.counts = {k: {"injected": 0, "skipped": 0, "failed": 0} for k in ALL_KINDS}
        self.skip_reasons = {}
        self.failures = []
        self.fault_log = []  # each fault injected: kind, rank, wall-clock start and end
        self.done = threading.Event()
        self._quit = threading.Event()
        self._t0 = time.monotonic()
        self._upgrade_state = None  # None: not asked yet; else (available, reason)
        self.thread = threading.Thread(target=self._run, name="faults", daemon=True)

    def start(self):
        self._t0 = time.monotonic()
        self.thread.start()

    def stop(self, timeout):
        """Take no further fault; wait up to ``timeout`` s for the current one; SIGCONT all."""
        self._quit.set()
        self.thread.join(timeout)
        self.stopper.cont_all()
        return not self.thread.is_alive()

    def _run(self):
        try:
            for fault in self.plan:
                if self._quit.wait(fault.gap):
                    break
                self._inject(fault)
        finally:
            self.stopper.cont_all()
            self.done.set()

    def _inject(self, fault):
        stamp = time.monotonic() - self._t0
        what = self.describe(fault)
        began, wall_began = time.monotonic(), time.time()
        try:
            skipped = getattr(self, "_" + fault.kind)(fault)
        except Exception as exc:  # a fault that could not be carried out is a finding
            self.counts[fault.kind]["failed"] += 1
            self.failures.append(f"t={stamp:.1f}s {what}: {exc}")
            self.log(f"[{stamp:7.1f}s] {what}: FAILED: {exc}")
            return
        if skipped:
            self.counts[fault.kind]["skipped"] += 1
            self.skip_reasons.setdefault(fault.kind, skipped)
            self.log(f"[{stamp:7.1f}s] {what}: skipped: {skipped}")
            return
        self.counts[fault.kind]["injected"] += 1
        self.fault_log.append({"kind": fault.kind, "rank": fault.rank, "start": wall_began,
                               "end": time.time()})  # fmt: skip
        self.log(f"[{stamp:7.1f}s] {what}: done in {time.monotonic() - began:.2f}s")

    # -- where a fault aims: overridden on the nodes (nodefaults.py) --

    def describe(self, fault):
        return fault.describe()

    def manager_env(self, rank):
        """The environment whose systemctl and busctl reach ``rank``'s systemd manager."""
        return None  # ours: one manager for every rank

    def broker_pid(self, rank):
        """``rank``'s broker pid now."""
        return self.brokers[rank]

    # -- the fault kinds: each returns None when injected, or why it was skipped --

    def _systemctl(self, rank, *args):
        res = subprocess.run(
            ["systemctl", "--user", *args], capture_output=True, text=True, timeout=CMD_TIMEOUT,
            env=self.manager_env(rank),
        )  # fmt: skip
        if res.returncode != 0:
            raise RuntimeError(f"systemctl --user {' '.join(args)}: {res.stderr.strip()}")

    def _reexec(self, fault):
        self._systemctl(fault.rank, "daemon-reexec")

    def _reload(self, fault):
        self._systemctl(fault.rank, "daemon-reload")

    def _buskill(self, fault):
        env = self.manager_env(fault.rank)
        pid = procs.bus_pid(env)
        if pid is None:
            raise RuntimeError("the session bus does not say its pid")
        os.kill(pid, signal.SIGKILL)
        _until(lambda: not procs.alive(pid), 10, f"dbus-daemon {pid} still alive after SIGKILL")
        # SIGKILL leaves dbus.service failed; reset it, so no failed unit stays and no start
        # limit stops dbus.socket from activating it again at the next connection. systemd
        # itself may take a minute to answer after losing the bus (seen here: 60 s and more).
        began = time.monotonic()
        subprocess.run(
            ["systemctl", "--user", "reset-failed", "dbus.service"],
            capture_output=True,
            timeout=AFTER_BUSKILL_TIMEOUT,
            env=env,
        )
        took = time.monotonic() - began
        if took > 5:
            self.log(f"    | systemd answered {took:.1f}s after the bus kill")
        if _wait(lambda: procs.bus_answers(env), BUS_BACK_TIMEOUT):
            return None
        if env is not None:
            raise RuntimeError(f"session bus not back {BUS_BACK_TIMEOUT}s after killing {pid}")
        # no socket activation here: start the bus the way the tests do
        subprocess.run(
            [os.path.join(self.srcdir, "t", "start-user-systemd.sh")],
            capture_output=True,
            timeout=CMD_TIMEOUT,
        )
        if not procs.bus_answers():
            raise RuntimeError(f"session bus not back {BUS_BACK_TIMEOUT}s after killing {pid}")

    def _stall(self, fault):
        pid = procs.manager_pid(self.manager_env(fault.rank))
        if pid is None:
            raise RuntimeError("the session bus does not say the systemd manager's pid")
        self.stopper.stop(pid)
        try:
            self._quit.wait(fault.arg)  # asked to stop early: resume systemd now
        finally:
            self.stopper.cont(pid)

    _longstall = _stall

    def _modstop(self, fault):
        broker = self.broker_pid(fault.rank)
        pid = procs.module_pid(broker, self.module_path)
        if pid is None:
            return f"no sdexec module process under broker {broker}"
        self.stopper.stop(pid)
        try:
            time.sleep(fault.arg)
        finally:
            self.stopper.cont(pid)

    def _clientkill(self, fault):
        # flux exec buffers the output it relays into a pipe: the command says it started by
        # creating a file instead
        with tempfile.TemporaryDirectory(prefix="chaos-client-") as tmp:
            os.chmod(tmp, 0o777)  # the command runs as the instance owner, maybe not us (site)
            flag = os.path.join(tmp, "started")
            cmd = ["flux", "exec", "--service", "sdexec", "-r", str(fault.rank),
                   "sh", "-c", f"touch {flag}; exec sleep 30"]  # fmt: skip
            client = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)  # fmt: skip
            try:
                _until(lambda: os.path.exists(flag), 30, "the client's command did not start")
                time.sleep(fault.arg)
            finally:
                client.kill()
                client.wait(10)

    def _upgrade(self, fault):
        available, reason = self._upgrade_available()
        if not available:
            return reason
        res = subprocess.run(
            ["flux", "sdexec", "upgrade", "--module", self.module_path],
            env=self._cmd_env(),
            capture_output=True,
            text=True,
            timeout=UPGRADE_TIMEOUT,
        )
        for line in (res.stdout + res.stderr).splitlines():
            self.log(f"    | {line}")
        if res.returncode != 0:
            raise RuntimeError(f"flux sdexec upgrade exited {res.returncode}")

    def _cmd_env(self):
        env = dict(os.environ)
        prepend = os.path.join(self.srcdir, "cmd")
        old = env.get("FLUX_EXEC_PATH_PREPEND")
        env["FLUX_EXEC_PATH_PREPEND"] = f"{prepend}:{old}" if old else prepend
        return env

    def _upgrade_available(self):
        """Ask the command itself: the real ``flux sdexec upgrade`` offers ``--module``."""
        if self._upgrade_state is None:
            res = subprocess.run(
                ["flux", "sdexec", "upgrade", "--help"],
                env=self._cmd_env(),
                capture_output=True,
                text=True,
                timeout=CMD_TIMEOUT,
            )
            if res.returncode == 0 and "--module" in res.stdout:
                self._upgrade_state = (True, None)
            else:
                said = (res.stdout + res.stderr).strip().splitlines()
                self._upgrade_state = (
                    False,
                    "flux sdexec upgrade is not available here"
                    + (f" ({said[0].strip()!r})" if said else ""),
                )
        return self._upgrade_state


def _wait(condition, timeout, step=0.2):
    """Poll ``condition`` until true or ``timeout`` seconds passed; return its last value."""
    deadline = time.monotonic() + timeout
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(step)


def _until(condition, timeout, message):
    if not _wait(condition, timeout):
        raise RuntimeError(message)
