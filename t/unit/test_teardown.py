"""Units that do not stop at unload: what teardown.see_units_gone sends, in which order.

A multi-user job shell unit (KillMode=process, main process the IMP) whose broker died
keeps the job's tasks after a stop: the flux user's manager cannot signal a guest's
processes, only the IMP can (SIGUSR1 = SIGKILL of the whole job, RFC 15).
"""

import logging
import os
import signal

from flux_sdexec.systemd import teardown

GRACE = 0.05


class FakeBridge:
    """The calls see_units_gone makes; a unit is forgotten by the kill in ``ends_on``."""

    def __init__(self, units, ends_on):
        self.loaded = dict.fromkeys(units, "deactivating")
        self.ends_on = ends_on
        self.kills = []
        self.rfd, self.wfd = os.pipe()

    def list_units(self, units):
        return [(u, self.loaded[u], "") for u in units if u in self.loaded]

    def kill_unit(self, unit, signum, who):
        self.kills.append((unit, signum, who))
        if (signum, who) == self.ends_on.get(unit):
            del self.loaded[unit]

    def reset_failed_unit(self, unit):
        pass

    def fileno(self):
        return self.rfd

    def pump(self):
        pass

    def close(self):
        os.close(self.rfd)
        os.close(self.wfd)


def test_a_shell_unit_gets_its_stop_signal_on_main_before_any_sigkill():
    shell = "imp-shell-2-fA:sys.service"
    bridge = FakeBridge([shell], {shell: (signal.SIGUSR1, "main")})
    teardown.see_units_gone(
        bridge, logging.getLogger("t"), [shell], GRACE, stop_signals={shell: signal.SIGUSR1}
    )
    bridge.close()
    assert bridge.kills == [(shell, signal.SIGUSR1, "main")]
    assert not bridge.loaded


def test_sigkill_all_follows_when_the_stop_signal_does_not_end_it():
    shell = "imp-shell-0-fB:sys.service"
    bridge = FakeBridge([shell], {shell: (signal.SIGKILL, "all")})
    teardown.see_units_gone(
        bridge, logging.getLogger("t"), [shell], GRACE, stop_signals={shell: signal.SIGUSR1}
    )
    bridge.close()
    assert bridge.kills == [(shell, signal.SIGUSR1, "main"), (shell, signal.SIGKILL, "all")]
    assert not bridge.loaded


def test_a_unit_without_stop_signal_gets_sigkill_all_only():
    unit = "sleep-fC:sys.service"
    bridge = FakeBridge([unit], {unit: (signal.SIGKILL, "all")})
    teardown.see_units_gone(bridge, logging.getLogger("t"), [unit], GRACE)
    bridge.close()
    assert bridge.kills == [(unit, signal.SIGKILL, "all")]
