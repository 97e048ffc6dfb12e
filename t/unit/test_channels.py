"""The stdio channels on real socketpairs, on a small stand-in reactor: an output stream
from its socket to the client (``output.OutputReader``), and stdin.

The reactor stand-in only does what flux's does for these watchers: it keeps the
callbacks and calls them when select() says the fd is ready or a timer is due. The
outbox stand-in keeps each response, or holds them as a congested socket would.
"""

import json
import select

import pytest

import fluxpath

fluxpath.add()
pytest.importorskip("flux", reason="flux's Python bindings are not installed")

from flux.constants import FLUX_POLLIN, FLUX_POLLOUT  # noqa: E402

from flux_sdexec.broker.channels import InputChannel  # noqa: E402
from flux_sdexec.broker.output import READ_MIN, OutputReader  # noqa: E402
from flux_sdexec.broker.watchers import Watchers  # noqa: E402
from flux_sdexec.core.events import OutputChunk, OutputClosed  # noqa: E402

from helpers import new  # noqa: E402

PID = 4242


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


class Outbox:
    """The outbox as the reader sees it: ``sent`` keeps each response as
    ``(msg, errnum, text)``; a congested one holds them, counted in their Flow, until
    ``flush()``."""

    def __init__(self, congested=False):
        self.sent = []
        self.held = []
        self.congested = congested

    def respond_output(self, msg, encoder, chunk, eof, flow):
        text = encoder.data(chunk, eof) if chunk else encoder.eof()
        if self.congested:
            self.held.append((msg, 0, text, flow))
            flow.add(len(text))
        else:
            self.sent.append((msg, 0, text))

    def flush(self):
        while self.held:
            msg, errnum, text, flow = self.held.pop(0)
            self.sent.append((msg, errnum, text))
            flow.sent(len(text))


class Request:
    msg = "exec-msg"


def reader(reactor, log, outbox=None, stream="stdout", background=False, **options):
    """An OutputReader of a process whose pid is PID, and the inputs it feeds the core."""
    p = new(streams=(stream,), background=background, request=Request(), **options)
    p.unit.pid = PID
    fed = []
    channel = OutputReader(
        StandInWatchers(reactor, log),
        log,
        p,
        stream,
        "0",
        outbox if outbox is not None else Outbox(),
        lambda proc, event: fed.append((proc, event)),
    )
    return channel, p, fed


def output(data=None, eof=False, stream="stdout"):
    """The exact bytes of an ``output`` response."""
    io = {"stream": stream, "rank": "0"}
    if data is not None:
        io["data"] = data
    if eof:
        io["eof"] = True
    return json.dumps({"type": "output", "pid": PID, "io": io}, separators=(",", ":")).encode()


def run(reactor):
    while reactor.run_once(timeout=0):
        pass


def test_each_line_is_one_response_and_eof_ends_the_stream():
    """Writes that cut lines anywhere go out one line per response on the exec request; the
    partial last line goes with the EOF, then OutputClosed, and the socket is closed."""
    reactor, log, outbox = Reactor(), Log(), Outbox()
    channel, p, fed = reader(reactor, log, outbox)
    remote = channel.remote.dup()  # systemd's copy; ours is released after the start
    channel.close_remote()
    channel.start()
    remote.sendall(b"one\ntw")
    reactor.run_once()
    remote.sendall(b"o\nthree")
    reactor.run_once()
    remote.close()
    reactor.run_once()
    assert outbox.sent == [
        ("exec-msg", 0, output("one\n")),
        ("exec-msg", 0, output("two\n")),
        ("exec-msg", 0, output("three", eof=True)),
    ]
    assert fed == [(p, OutputClosed("stdout"))]
    assert channel.sock is None and not reactor.active


def test_eof_after_a_whole_line_is_a_response_of_its_own():
    """Nothing held at EOF: an EOF-only response, on stderr as on stdout."""
    reactor, log, outbox = Reactor(), Log(), Outbox()
    channel, _, _ = reader(reactor, log, outbox, stream="stderr")
    channel.start()
    channel.remote.sendall(b"x\n")
    channel.remote.close()
    channel.remote = None
    run(reactor)
    assert [text for _, _, text in outbox.sent] == [
        output("x\n", stream="stderr"),
        output(eof=True, stream="stderr"),
    ]


def test_raw_mode_sends_each_read_as_it_came():
    """Without line buffering a read is one response, newlines or not."""
    reactor, log, outbox = Reactor(), Log(), Outbox()
    channel, _, _ = reader(reactor, log, outbox, line_buffer=False)
    channel.start()
    channel.remote.sendall(b"a\nb\nc")
    run(reactor)
    assert [text for _, _, text in outbox.sent] == [output("a\nb\nc")]
    channel.close()


def test_a_full_buffer_sends_a_partial_line():
    """A line longer than the stream's buffer goes out in pieces of the buffer's size."""
    reactor, log, outbox = Reactor(), Log(), Outbox()
    channel, _, _ = reader(reactor, log, outbox, bufsize=4)
    channel.start()
    channel.remote.sendall(b"abcdefg\n")
    run(reactor)
    assert [text for _, _, text in outbox.sent] == [output("abcd"), output("efg\n")]
    channel.close()


def test_background_output_is_fed_to_the_core():
    """A background process's lines are OutputChunk inputs, the responder is not used; an
    EOF with nothing held feeds no chunk, only OutputClosed."""
    reactor, log, outbox = Reactor(), Log(), Outbox()
    channel, p, fed = reader(reactor, log, outbox, background=True)
    channel.start()
    channel.remote.sendall(b"a\nb\n")
    channel.remote.close()
    channel.remote = None
    run(reactor)
    assert outbox.sent == []
    assert fed == [
        (p, OutputChunk("stdout", "0", b"a\n", False)),
        (p, OutputChunk("stdout", "0", b"b\n", False)),
        (p, OutputClosed("stdout")),
    ]


def test_the_imps_fatal_line_is_seen_on_stderr():
    """A foreground IMP's stderr lines go out, and its fatal line is kept (impfatal.py)."""
    reactor, log, outbox = Reactor(), Log(), Outbox()
    imp = ("/usr/libexec/flux/flux-imp", "exec", "/usr/libexec/flux/flux-shell")
    channel, p, _ = reader(reactor, log, outbox, stream="stderr", cmdline=imp)
    channel.remote.sendall(b"flux-imp: Fatal: no\n")
    channel.drain()
    assert p.answers.imp_error.line == "flux-imp: Fatal: no"
    assert len(outbox.sent) == 1
    channel.close()


def test_drain_reads_what_is_written_while_the_peer_stays_open():
    """drain() takes everything already in the socket, partial line included, without
    waiting for EOF (the unit of a waitable process keeps its end open)."""
    reactor, log = Reactor(), Log()
    channel, p, fed = reader(reactor, log, background=True)
    channel.remote.sendall(b"a\nb\npartial")
    channel.drain()
    assert [event.data for _, event in fed] == [b"a\n", b"b\n", b"partial"]
    assert channel.sock is not None
    channel.close()


def test_stats_show_the_fds_and_the_buffer():
    reactor, log = Reactor(), Log()
    channel, _, _ = reader(reactor, log, bufsize=100)
    channel.start()
    channel.remote.sendall(b"held")
    reactor.run_once()
    assert channel.stats() == {
        "local_fd": channel.sock.fileno(),
        "remote_fd": channel.remote.fileno(),
        "buf_used": 4,
        "buf_free": 96,
        "eof": False,
    }
    channel.close()
    assert channel.stats()["eof"] and channel.stats()["local_fd"] == -1


def test_an_exception_on_the_way_out_is_logged_and_does_not_escape():
    """Finding 4: what raises inside an fd watcher callback is logged; the callback returns
    normally, so flux's watcher wrapper does not stop the reactor."""
    reactor, log = Reactor(), Log()

    class Broken(Outbox):
        def respond_output(self, msg, encoder, chunk, eof, flow):
            raise RuntimeError("outbox failed")

    channel, _, _ = reader(reactor, log, Broken())
    channel.start()
    channel.remote.sendall(b"line\n")
    assert reactor.run_once() == 1
    assert any("outbox failed" in str(text) for _, text in log.records)
    channel.close()


def test_reading_pauses_while_its_responses_are_queued():
    """Back-pressure: once more than the Flow's bound of a stream's responses waits to
    be sent, the reader stops reading (the writer then blocks on a full socket); as the
    queue drains below half the bound it reads again, and nothing is lost or reordered."""
    reactor, log, outbox = Reactor(), Log(), Outbox(congested=True)
    channel, _, _ = reader(reactor, log, outbox)
    flow = channel.flow
    flow.bound = 1000
    channel.start()
    lines = [b"%05d\n" % i for i in range(10000)]
    channel.remote.setblocking(False)
    assert channel.remote.send(b"".join(lines)) == 60000  # the socket takes them all
    run(reactor)
    assert flow.paused and not reactor.active
    assert len(outbox.held) == READ_MIN // 6  # one read past the bound, no more
    while len(outbox.sent) < len(lines):
        outbox.flush()
        reactor.run_once(timeout=0)
    assert [text for _, _, text in outbox.sent] == [output(line.decode()) for line in lines]
    assert flow.queued == 0 and not flow.paused
    channel.close()


def test_a_reader_paused_before_it_starts_waits_for_resume():
    """The outbox may pause a stream before its reader starts: it starts stopped."""
    reactor, log = Reactor(), Log()
    channel, _, _ = reader(reactor, log)
    channel.flow.bound = 0
    channel.flow.add(1)
    channel.start()
    assert channel.flow.paused and not reactor.active
    channel.flow.sent(1)
    assert reactor.active
    channel.close()


def test_stdin_is_queued_until_the_socket_takes_it():
    """A write larger than the socket buffer never blocks: the rest waits for POLLOUT,
    and EOF closes our end after the last byte."""
    reactor, log = Reactor(), Log()
    channel = InputChannel(StandInWatchers(reactor, log), log, "sh")
    remote = channel.remote.dup()  # systemd's copy; ours is released after the start
    channel.close_remote()
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
