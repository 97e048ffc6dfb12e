"""Output and input channels on real socketpairs, on a small stand-in reactor.

The reactor stand-in only does what flux's does for these watchers: it keeps the
callbacks and calls them when select() says the fd is ready or a timer is due.
"""

import select

import pytest

pytest.importorskip("flux", reason="flux's Python bindings are not installed")

from flux.constants import FLUX_POLLIN, FLUX_POLLOUT  # noqa: E402

from flux_sdexec.adapters.channels import OutputChannel  # noqa: E402
from flux_sdexec.adapters.guard import Watchers  # noqa: E402
from flux_sdexec.linebuf import OutputBuffer  # noqa: E402


class Log:
    """A BrokerLogger stand-in that keeps what was logged."""

    def __init__(self):
        self.records = []

    def __call__(self, level, text):
        self.records.append((level, text))

    def error(self, text):
        self.records.append(("error", text))

    debug = info = warning = error


class Watcher:
    def __init__(self, reactor, fd, events, callback):
        self.reactor, self.fd, self.events, self.callback = reactor, fd, events, callback

    def start(self):
        self.reactor.active.add(self)

    def stop(self):
        self.reactor.active.discard(self)

    def destroy(self):
        self.stop()


class Reactor:
    """Enough of a flux handle for fd watchers."""

    def __init__(self):
        self.active = set()

    def fd_watcher_create(self, fd, callback, events=FLUX_POLLIN, args=None):
        return Watcher(self, fd, events, callback)

    def run_once(self, timeout=5.0):
        """Call the callback of every ready watcher once; return how many ran."""
        readers = [w for w in self.active if w.events & FLUX_POLLIN]
        writers = [w for w in self.active if w.events & FLUX_POLLOUT]
        r, w, _ = select.select([x.fd for x in readers], [x.fd for x in writers], [], timeout)
        ready = [x for x in readers if x.fd in r] + [x for x in writers if x.fd in w]
        for watcher in ready:
            watcher.callback(self, watcher, watcher.fd, 0, None)
        return len(ready)


def test_exception_in_output_callback_is_logged_and_does_not_escape():
    """Finding 4: a sink that raises inside an fd watcher callback is logged; the
    callback returns normally, so flux's watcher wrapper does not stop the reactor."""
    reactor, log = Reactor(), Log()

    def boom(chunk, eof):
        raise RuntimeError("sink failed")

    channel = OutputChannel(
        Watchers(reactor, log), "stdout", OutputBuffer(), boom, lambda s: None, log
    )
    channel.start()
    channel.remote.sendall(b"line\n")
    assert reactor.run_once() == 1
    assert any("sink failed" in str(text) for _, text in log.records)
    channel.close()
