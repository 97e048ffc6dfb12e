"""A small model of systemd and of the adapters, for driving SdProcs at random.

``SimUnit`` behaves towards the core as a transient unit of systemd 252 with
RemainAfterExit does (the order and shape of PropertiesChanged as recorded in
t/fixtures): each signal it queues is one input; systemd calls (StopUnit,
KillUnit, ResetFailedUnit) change what it will say next. Deliberately loose in
timing: whatever systemd may do at any moment is offered to the driver.
"""

import signal

FATES = ("exit0", "exit1", "signal", "execfail", "hang", "vanish")


class SimUnit:
    """One unit's life as systemd would report it."""

    def __init__(self, rng, fate, pid=4242):
        self.rng = rng
        self.fate = fate
        self.pid = pid
        self.state = ("inactive", "dead")
        self.queue = []  # signals not yet delivered
        self.alive = False  # the main process runs
        self.stuck = fate == "hang"  # ignores SIGTERM and the configured signal
        self.signal({"ExecMainPID": 0, "ExecMainCode": 0, "ExecMainStatus": 0})
        self.signal({"ActiveState": "inactive", "SubState": "dead"})  # before the start
        if fate == "execfail":
            self.signal({"ExecMainPID": pid, "ExecMainCode": 1, "ExecMainStatus": 203})
            self.move("failed", "failed", Result="exit-code")
        else:
            self.move("activating", "start")
            self.signal({"ExecMainPID": pid})
            self.move("active", "running")
            self.alive = True

    def signal(self, props):
        self.queue.append(props)

    def move(self, active, sub, **extra):
        self.state = (active, sub)
        self.signal({"ActiveState": active, "SubState": sub, **extra})

    # ---- things systemd or the process may do on their own ----

    def spontaneous(self):
        """What may happen now without anyone asking, as callables."""
        moves = []
        if self.alive and self.state == ("active", "running"):
            moves.append(self.exit_on_its_own)
            moves.append(self.stop_on_its_own)  # e.g. RuntimeMaxSec
        if self.alive and self.state[0] == "deactivating" and self.stuck:
            moves.append(self.admin_kill)
        return moves

    def exit_on_its_own(self):
        if self.fate == "vanish":
            self.alive = False
            self.move("deactivating", "stop")
            self.move("inactive", "dead")
        elif self.fate == "signal":
            self.die(2, int(signal.SIGSEGV))
        elif self.fate == "exit1":
            self.die(1, 1)
        elif self.fate == "hang":
            self.stop_on_its_own()
        else:
            self.die(1, 0)

    def stop_on_its_own(self):
        self.move("deactivating", "stop-sigterm")
        if not self.stuck:
            self.die(2, int(signal.SIGTERM))

    def admin_kill(self):
        self.stuck = False
        self.die(2, int(signal.SIGKILL))

    def die(self, code, status):
        self.alive = False
        self.signal({"ExecMainCode": code, "ExecMainStatus": status})
        if code == 1 and status == 0:
            if self.state[0] == "deactivating":
                self.move("inactive", "dead")
            else:
                self.move("active", "exited")
        else:
            self.move("failed", "failed", Result="exit-code" if code == 1 else "signal")

    # ---- systemd calls ----

    def stop_unit(self):
        if self.state == ("active", "exited"):
            self.move("deactivating", "stop")
            self.move("inactive", "dead")
        elif self.alive:
            self.move("deactivating", "stop-sigterm")
            if not self.stuck:
                self.die(2, int(signal.SIGTERM))

    def kill_unit(self, signum):
        if self.alive and (signum == signal.SIGKILL or not self.stuck):
            if signum == signal.SIGKILL:
                self.stuck = False
            self.die(2, int(signum))

    def reset_failed(self):
        if self.state[0] == "failed":
            self.move("inactive", "dead")
