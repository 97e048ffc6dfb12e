"""The stdio socketpairs of one unit, pumped by flux fd watchers.

``OutputChannel`` reads one output stream, splits it with ``linebuf.OutputBuffer``
and hands each chunk to a sink (stream it to the client, or log and retain it
for a background process). ``InputChannel`` writes stdin without ever blocking
the reactor: what the socket does not take is queued until it is writable.
"""

import socket
import syslog

from flux.constants import FLUX_POLLIN, FLUX_POLLOUT

# Python allocates the whole size asked of recv() first: a read sized to what may be
# queued, not to the most that could ever be, saves ~20 µs per small read. The size
# follows the reads between READ_MIN and what the socket can hold (its SO_SNDBUF).
READ_MIN = 16 * 1024


class _Socketpair:
    """Our non-blocking end (``sock``) and systemd's end (``remote``) of one stdio socketpair."""

    def __init__(self, watchers, log):
        self._watchers = watchers
        self._log = log
        self.sock, self.remote = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.setblocking(False)
        self._watcher = None

    def local_fd(self):
        return self.sock.fileno() if self.sock else -1

    def remote_fd(self):
        return self.remote.fileno() if self.remote else -1

    def release_remote(self):
        """Close systemd's end in this process once systemd holds its own copy."""
        if self.remote:
            self.remote.close()
            self.remote = None

    def close(self):
        """Stop the watcher and close both ends (the process sees EOF); harmless to repeat."""
        self._stop_watcher()
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        self.release_remote()

    def _stop_watcher(self):
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher.destroy()
            self._watcher = None


class OutputChannel(_Socketpair):
    """Our end of one output socketpair.

    Args:
        watchers: the ``watchers.Watchers`` that make the (guarded) fd watcher.
        stream: ``stdout`` or ``stderr``.
        buffer: the OutputBuffer of the stream.
        on_chunk: ``on_chunk(chunk, eof)`` for each chunk; ``chunk`` may be b"" with eof.
        on_closed: ``on_closed(stream)`` once, after the last chunk.
        log: the module's BrokerLogger.
        flow: the ``outbox.Flow`` of its responses; reading pauses while it is over its bound.
    """

    def __init__(self, watchers, stream, buffer, on_chunk, on_closed, log, flow=None):
        super().__init__(watchers, log)
        if flow is not None:  # back-pressure: no reading while its responses are queued
            flow.pause, flow.resume = self._pause, self._resume
        self._flow = flow
        self._paused = False
        self.stream = stream
        self.buffer = buffer
        self._on_chunk = on_chunk
        self._on_closed = on_closed
        self._read_max = max(READ_MIN, self.remote.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF))
        self._read_size = READ_MIN

    def start(self):
        """Start reading (after "started", so output never precedes it)."""
        if self.sock and self._watcher is None:
            self._watcher = self._watchers.fd(
                self.sock.fileno(), FLUX_POLLIN, self._read_once, self.stream
            )
            if not self._paused:
                self._watcher.start()

    def _pause(self):
        self._paused = True
        if self._watcher is not None:
            self._watcher.stop()

    def _resume(self):
        self._paused = False
        if self._watcher is not None:
            self._watcher.start()

    def _read_once(self):
        """One read; False when nothing more can be read now."""
        try:
            # while responses wait, small reads: one read of short lines is many messages
            size = READ_MIN if self._flow is not None and self._flow.count else self._read_size
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
            self._on_chunk(chunk, False)
        return True

    def drain(self):
        """Read everything already written, partial last line included.

        For a process that has exited but whose unit still holds the socket open.
        """
        while self.sock is not None and self._read_once():
            pass
        pending = self.buffer.eof()
        if pending:
            self._on_chunk(pending, False)

    def _eof(self):
        pending = self.buffer.eof()
        if self.buffer.line_mode or not pending:
            self._on_chunk(pending, True)
        self.close()
        self._on_closed(self.stream)

    def stats(self):
        """The channel as ``flux module stats sdexec`` shows it."""
        return {
            "local_fd": self.local_fd(),
            "remote_fd": self.remote_fd(),
            "buf_used": self.buffer.used,
            "buf_free": self.buffer.free,
            "eof": self.sock is None,
        }


class InputChannel(_Socketpair):
    """Our end of the stdin socketpair; queues what the socket cannot take yet."""

    def __init__(self, watchers, log, logname):
        super().__init__(watchers, log)
        self._logname = logname
        self._queue = bytearray()
        self._eof = False

    def write(self, data, eof):
        """Queue ``data`` (and EOF after it) for the process's stdin."""
        if self.sock is None:  # the process is over: the ordinary race of a fast command
            self._log.debug(f"sdexec.write: {self._logname}: stdin is closed")
            return
        if self._eof:  # the client wrote after its own EOF
            self._log.error(f"sdexec.write: {self._logname}: write after EOF")
            return
        self._queue += data
        self._eof = eof
        self._flush()

    def _flush(self):
        try:
            while self._queue:
                sent = self.sock.send(self._queue)
                del self._queue[:sent]
        except BlockingIOError:
            self._want_writable(True)
            return
        except OSError as exc:
            self._log(syslog.LOG_DEBUG, f"{self._logname}: stdin: {exc.strerror}")
            self._queue.clear()
            self._eof = True
        self._want_writable(False)
        if self._eof:
            self.close()

    def _want_writable(self, on):
        if on and self._watcher is None:
            self._watcher = self._watchers.fd(
                self.sock.fileno(), FLUX_POLLOUT, self._flush, "stdin"
            )
            self._watcher.start()
        elif not on:
            self._stop_watcher()

    def stats(self):
        return {"local_fd": self.local_fd(), "remote_fd": self.remote_fd()}
