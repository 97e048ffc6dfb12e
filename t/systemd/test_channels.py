"""Output and input channels on real socketpairs, on a small stand-in reactor.

The reactor stand-in only does what flux's does for these watchers: it keeps the
callbacks and calls them when select() says the fd is ready or a timer is due.
"""

import select

import pytest

pytest.importorskip("flux", reason="flux's Python bindings are not installed")

from flux.constants import FLUX_POLLIN, FLUX_POLLOUT  # noqa: E402

from flux_sdexec.broker.channels import READ_MIN, InputChannel, OutputChannel  # noqa: E402
from flux_sdexec.broker.outbox import Flow  # noqa: E402
from flux_sdexec.broker.watchers import Watchers  # noqa: E402
from flux_sdexec.core.linebuf import OutputBuffer  # noqa: E402


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


class StandInWatchers(Watchers):
    """The real guards, on the stand-in's watcher objects (flux's C API needs a broker)."""

    def _make(self, kind, args, func):
        callback = lambda *a: func()  # noqa: E731
        if kind == "fd":
            return self._h.fd_watcher_create(args[0], callback, events=args[1])
        return self._h.timer_watcher_create(args[0], callback)


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
        StandInWatchers(reactor, log), "stdout", OutputBuffer(), boom, lambda s: None, log
    )
    channel.start()
    channel.remote.sendall(b"line\n")
    assert reactor.run_once() == 1
    assert any("sink failed" in str(text) for _, text in log.records)
    channel.close()


def output(reactor, log, line_mode=True, size=1 << 20):
    """An OutputChannel reading from the socketpair, recording chunks and the close."""
    seen = {"chunks": [], "closed": []}
    channel = OutputChannel(
        StandInWatchers(reactor, log),
        "stdout",
        OutputBuffer(line_mode, size),
        lambda chunk, eof: seen["chunks"].append((chunk, eof)),
        seen["closed"].append,
        log,
    )
    return channel, seen


def test_lines_are_split_and_eof_ends_the_stream():
    """Writes that cut lines anywhere come out one line per chunk; the partial last line
    goes out with the EOF, then on_closed, and the socket is closed."""
    reactor, log = Reactor(), Log()
    channel, seen = output(reactor, log)
    remote = channel.remote.dup()  # systemd's copy; ours is released after the start
    channel.release_remote()
    channel.start()
    remote.sendall(b"one\ntw")
    reactor.run_once()
    remote.sendall(b"o\nthree")
    reactor.run_once()
    remote.close()
    reactor.run_once()
    assert seen == {
        "chunks": [(b"one\n", False), (b"two\n", False), (b"three", True)],
        "closed": ["stdout"],
    }
    assert channel.sock is None and not reactor.active


def test_drain_reads_what_is_written_while_the_peer_stays_open():
    """drain() takes everything already in the socket, partial line included, without
    waiting for EOF (the unit of a waitable process keeps its end open)."""
    reactor, log = Reactor(), Log()
    channel, seen = output(reactor, log)
    channel.remote.sendall(b"a\nb\npartial")
    channel.drain()
    assert seen["chunks"] == [(b"a\n", False), (b"b\n", False), (b"partial", False)]
    assert seen["closed"] == []
    channel.close()


def test_stdin_is_queued_until_the_socket_takes_it():
    """A write larger than the socket buffer never blocks: the rest waits for POLLOUT,
    and EOF closes our end after the last byte."""
    reactor, log = Reactor(), Log()
    channel = InputChannel(StandInWatchers(reactor, log), log, "sh")
    remote = channel.remote.dup()  # systemd's copy; ours is released after the start
    channel.release_remote()
    data = b"x" * (4 << 20)
    channel.write(data, eof=True)
    assert channel.sock is not None and reactor.active  # queued, waiting to be writable
    received = bytearray()
    remote.setblocking(False)
    while True:
        try:
            chunk = remote.recv(1 << 20)
        except BlockingIOError:
            reactor.run_once()
            continue
        if not chunk:
            break
        received += chunk
    assert bytes(received) == data and channel.sock is None
    remote.close()


class Recorder:
    """A handle that keeps the callback of each watcher it creates."""

    def __init__(self):
        self.callbacks = []

    def _keep(self, callback):
        self.callbacks.append(callback)
        return object()

    def fd_watcher_create(self, fd, callback, events=FLUX_POLLIN, args=None):
        return self._keep(callback)

    def timer_watcher_create(self, after, callback, repeat=0.0, args=None):
        return self._keep(callback)

    def signal_watcher_create(self, signum, callback, args=None):
        return self._keep(callback)


def test_every_watcher_kind_is_guarded():
    """Finding 4, for timers (stop timer, reconnect retry) and the SIGTERM watcher too:
    each callback logs what its function raised and returns."""
    handle, log = Recorder(), Log()
    watchers = StandInWatchers(handle, log)

    def boom():
        raise RuntimeError("boom")

    watchers.fd(0, FLUX_POLLIN, boom, "fd")
    watchers.timer(1.0, boom, "timer")
    watchers.signal(15, boom, "SIGTERM")
    for callback in handle.callbacks:
        callback(handle, None, 0, None)
    assert [text for _, text in log.records] == [
        "fd: RuntimeError('boom')",
        "timer: RuntimeError('boom')",
        "SIGTERM: RuntimeError('boom')",
    ]


def test_output_pauses_while_its_responses_are_queued():
    """Back-pressure: once more than the Flow's bound of a stream's responses waits to
    be sent, the channel stops reading (the writer then blocks on a full socket); as the
    queue drains below half the bound it reads again, and nothing is lost or reordered."""
    reactor, log = Reactor(), Log()
    flow = Flow(bound=1000)
    queued = []  # the responses the outbox could not send yet

    def sink(chunk, eof):
        queued.append(chunk)
        flow.add(len(chunk))

    channel = OutputChannel(
        StandInWatchers(reactor, log), "stdout", OutputBuffer(), sink, lambda s: None, log, flow
    )
    channel.start()
    lines = [b"%05d\n" % i for i in range(2000)]
    channel.remote.setblocking(False)
    channel.remote.send(b"".join(lines))  # 12000 bytes: the socket takes them all
    while reactor.run_once(timeout=0):
        pass
    assert flow.paused and not reactor.active
    assert 1000 < flow.queued <= 1000 + READ_MIN  # one read past the bound, no more
    sent = []
    while len(sent) < len(lines):
        while queued:  # the outbox sends everything queued
            chunk = queued.pop(0)
            sent.append(chunk)
            flow.sent(len(chunk))
        reactor.run_once(timeout=0)
    assert sent == lines and flow.queued == 0 and not flow.paused
    channel.close()
