"""A real SdexecService (the composition root, every part its own) on a loop:// flux handle,
with systemd replaced by a fake bridge: how unit tests drive feed() and unload() without a
broker or a manager. ``RootBridge`` answers what the root asks of systemd at load (nothing
is loaded); a test's bridge extends it with the calls it watches."""

import errno
import os

import fluxpath
from stubs import StubLog

fluxpath.add()

import flux  # noqa: E402

from flux_sdexec.broker.service import SdexecService  # noqa: E402
from flux_sdexec.core.errors import UnitError  # noqa: E402
from flux_sdexec.core.naming import UnitNamer  # noqa: E402


class Signals:
    """bridge.signals as the root reads it: through the private socket, no counts."""

    over_bus = False

    def stats(self):
        return {}


class RootBridge:
    """systemd with nothing loaded, reached through the private socket; calls sent without
    waiting go to ``pending`` (``on_reply``, answer) and are answered by ``pump``."""

    via = "/run/user/0/systemd/private"

    def __init__(self):
        self.signals = Signals()
        self.sent, self.pending = [], []
        self.rfd, self.wfd = os.pipe()
        os.write(self.wfd, b"x")  # always readable: the unload's select() returns at once

    def open(self):
        pass

    def fileno(self):
        return self.rfd

    def list_units(self, patterns, on_reply=None, timeout=None):
        return []

    def pump(self):
        ready, self.pending = self.pending, []
        for on_reply, answer in ready:
            on_reply(answer)

    def next_deadline(self):
        return 0.0 if self.pending else None

    def wants_write(self):
        return False

    def fail_pending(self, exc):
        pending, self.pending = self.pending, []
        for on_reply, _ in pending:
            on_reply(exc)

    def close(self):
        self.fail_pending(UnitError(errno.ECONNRESET, "closed"))
        os.close(self.rfd)
        os.close(self.wfd)


def service(bridge, namer=None, **settings):
    """The service of rank 0 of instance ``tb`` (or ``namer``'s), reaching ``bridge``."""
    return SdexecService(
        flux.Flux("loop://"),
        StubLog(),
        0,
        "local:///run/flux/local",
        namer or UnitNamer("tb", 0, False),
        bridge_class=lambda on_change, tracked, shared: bridge,
        **settings,
    )
