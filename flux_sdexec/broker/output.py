"""One output stream of a unit, from its socket to the client.

``OutputReader`` reads our end of the stream's socketpair when its fd watcher says so,
cuts what it read into chunks with its ``OutputBuffer`` and sends each chunk on:

- a foreground process's chunk is an ``output`` response on the exec request: the per-line
  hot path, built and sent by the ``outbox.Outbox`` (``respond_output``, whose
  ``responses.OutputEncoder`` escapes the text into the message), never touching the
  state machine;
- a background process's chunk is an ``OutputChunk`` input: the core logs it and keeps it
  for a wait.

In line mode a chunk is one line, because that is what the clients need: libsubprocess'
remote client (remote.c ``remote_out_check_cb``) waits for a complete line but then calls
the output callback once per reactor turn, and ``flux exec`` (``output_cb``) and bulk-exec
(``exec_output_cb``) take everything buffered with ``flux_subprocess_read``: a message of
many lines would get one ``--label-io`` prefix, one exec.eventlog entry (t0025 shows it).

Back-pressure: the reader's ``outbox.Flow`` counts its responses the outbox still holds;
over the Flow's bounds the outbox calls the reader's ``pause()``, then ``resume()``. At EOF
the reader sends what is left and feeds ``OutputClosed``.
"""

import socket

from flux.constants import FLUX_POLLIN

from flux_sdexec.broker.channels import Socketpair
from flux_sdexec.broker.outbox import Flow
from flux_sdexec.core import responses
from flux_sdexec.core.events import OutputChunk, OutputClosed
from flux_sdexec.core.protocol import DEFAULT_BUFSIZE

# Python allocates the whole size asked of recv() first: a read sized to what may be
# queued, not to the most that could ever be, saves ~20 µs per small read. The size
# follows the reads between READ_MIN and what the socket can hold (its SO_SNDBUF).
READ_MIN = 16 * 1024


class OutputBuffer:
    """Splits one output stream into the chunks to send.

    Args:
        line_mode: one line per chunk (True) or one read per chunk (False).
        size: the most a partial line may grow before it is sent as is.
    """

    __slots__ = ("line_mode", "size", "_pending")

    def __init__(self, line_mode=True, size=DEFAULT_BUFSIZE):
        self.line_mode = line_mode
        self.size = size
        self._pending = b""

    @property
    def used(self):
        """Bytes held back waiting for a newline."""
        return len(self._pending)

    @property
    def free(self):
        """How much the next read may bring."""
        return self.size - len(self._pending)

    def feed(self, data):
        """Return the chunks ``data`` completes (bytes, each ending in a newline in line mode)."""
        if not self.line_mode:
            return [data]
        if self._pending:
            data = self._pending + data
        end = data.rfind(b"\n") + 1
        if end == 0:
            if len(data) >= self.size:
                self._pending = b""
                return [data]
            self._pending = data
            return []
        self._pending = data[end:]
        if data.find(b"\n") == end - 1:  # exactly one complete line: no split, no copies
            return [data if end == len(data) else data[:end]]
        lines = data[:end].split(b"\n")
        lines.pop()
        return [line + b"\n" for line in lines]

    def eof(self):
        """Return what is still held (sent with the EOF), emptying the buffer."""
        pending, self._pending = self._pending, b""
        return pending


class OutputReader(Socketpair):
    """Our end of one output socketpair of SdProc ``p``, and where its chunks go.

    Args:
        watchers: the ``watchers.Watchers`` that make the (shielded) fd watcher.
        log: the module's BrokerLogger.
        p: the SdProc; its command, exec request, IMP watch and pid are read, never written.
        stream: ``stdout`` or ``stderr``.
        rank: this broker's rank, as a string.
        outbox: the ``outbox.Outbox`` a foreground chunk's response goes to.
        feed: ``feed(p, event)``, the service's way into the state machine.
    """

    def __init__(self, watchers, log, p, stream, rank, outbox, feed):
        super().__init__(watchers, log)
        self.stream = stream
        self.buffer = OutputBuffer(p.cmd.line_buffer[stream], p.cmd.bufsize[stream])
        self.flow = Flow(self)
        self._p = p
        self._rank = rank
        self._feed = feed
        if p.cmd.background:
            self._deliver = self._feed_chunk
        else:
            self._deliver = self._respond
            self._msg = p.exec_request.msg
            self._outbox = outbox
            self._encoder = None  # built at the first chunk: the pid is known by then
            self._imp_error = p.answers.imp_error if stream == "stderr" else None  # impfatal.py
        self._read_max = max(READ_MIN, self.remote.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF))
        self._read_size = READ_MIN

    def start(self):
        """Start reading (after "started", so output never precedes it)."""
        if self.sock and self._watcher is None:
            self._watcher = self._watchers.fd(
                self.sock.fileno(), FLUX_POLLIN, self._read_once, self.stream
            )
            if not self.flow.paused:
                self._watcher.start()

    def pause(self):
        """Stop reading: the outbox holds too much of this stream (``Flow``)."""
        if self._watcher is not None:
            self._watcher.stop()

    def resume(self):
        """Read again: the outbox sent enough of what it held."""
        if self._watcher is not None:
            self._watcher.start()

    def _read_once(self):
        """One read; False when nothing more can be read now."""
        try:
            # while responses wait, small reads: one read of short lines is many messages
            size = READ_MIN if self.flow.count else self._read_size
            data = self.sock.recv(min(self.buffer.free, size) or 1)
        except BlockingIOError:
            return False
        except OSError as exc:
            self._log.error(f"{self.stream}: error reading from {self.stream}: {exc.strerror}")
            data = b""
        if not data:
            self._eof()
            return False
        if len(data) == size:
            self._read_size = min(size * 2, self._read_max)
        elif len(data) < size // 4 and size > READ_MIN:
            self._read_size = size // 2
        for chunk in self.buffer.feed(data):
            self._deliver(chunk, False)
        return True

    def _respond(self, chunk, eof):
        """Foreground: ``chunk`` (b"" with eof: EOF alone) as one ``output`` response."""
        if self._encoder is None:
            self._encoder = responses.OutputEncoder(self.stream, self._rank, self._p.pid)
        if self._imp_error is not None and chunk:
            self._imp_error.see(chunk)
        self._outbox.respond_output(self._msg, self._encoder, chunk, eof, self.flow)

    def _feed_chunk(self, chunk, eof):
        """Background: ``chunk`` as an OutputChunk input of the core (nothing for EOF alone)."""
        if chunk:
            self._feed(self._p, OutputChunk(self.stream, self._rank, chunk, eof))

    def drain(self):
        """Read everything already written, partial last line included.

        For a process that has exited but whose unit still holds the socket open.
        """
        while self.sock is not None and self._read_once():
            pass
        pending = self.buffer.eof()
        if pending:
            self._deliver(pending, False)

    def _eof(self):
        pending = self.buffer.eof()
        if self.buffer.line_mode or not pending:
            self._deliver(pending, True)
        self.close()
        self._feed(self._p, OutputClosed(self.stream))

    def stats(self):
        """The channel as ``flux module stats sdexec`` shows it."""
        return {
            "local_fd": self.local_fd(),
            "remote_fd": self.remote_fd(),
            "buf_used": self.buffer.used,
            "buf_free": self.buffer.free,
            "eof": self.sock is None,
        }
