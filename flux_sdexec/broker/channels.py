"""The stdio socketpairs of one unit, pumped by flux fd watchers.

``Socketpair`` is one channel's pair of ends: ours, and systemd's until it holds its
own copy. ``InputChannel`` writes stdin without ever blocking the reactor: what the
socket does not take is queued until it is writable. The output streams are read by
``output.OutputReader``.
"""

import socket
import syslog

from flux.constants import FLUX_POLLOUT


class Socketpair:
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

    def close_remote(self):
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
        self.close_remote()

    def _stop_watcher(self):
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher.destroy()
            self._watcher = None


class InputChannel(Socketpair):
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
