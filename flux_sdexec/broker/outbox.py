"""Responses sent without blocking the reactor, in order, with back-pressure.

``Outbox.respond`` derives the response to a request and sends it; ``respond_output``
does the same for one chunk of a foreground stream, encoding it into the message. ``flux_respond``
blocks while the socket to the broker is full; the outbox sends with FLUX_O_NONBLOCK
instead. Once the socket refuses one (which is then finished, see Outbox), the
responses after it wait in one FIFO (so they keep their order) until a handle watcher
says the handle is writable.
A ``Flow`` counts the queued bytes and messages of one output stream: above its
bounds it pauses the stream's reader (which reads little while anything is queued),
and resumes it once half of that has gone out, so a fast writer can neither stall
the module nor grow its memory without limit.
"""

import errno
from collections import deque

from flux.core.inner import ffi, lib

FLOW_BOUND = 1 << 20  # queued output bytes of one stream before its reader pauses
FLOW_MESSAGES = 4096  # ... or queued messages (short lines cost more per byte)


class Flow:
    """The queued responses of one output stream, and the brake on its reader.

    Args:
        reader: what reads the stream (``output.OutputReader``): ``reader.pause()`` once
            more than ``bound`` bytes or FLOW_MESSAGES messages of it are queued,
            ``reader.resume()`` once at most half of both are.
        bound: the queued bytes before the reader pauses.
    """

    __slots__ = ("queued", "count", "bound", "paused", "_reader")

    def __init__(self, reader, bound=FLOW_BOUND):
        self.queued = 0  # bytes
        self.count = 0  # messages
        self.bound = bound
        self.paused = False
        self._reader = reader

    def add(self, n):
        self.queued += n
        self.count += 1
        if not self.paused and (self.queued > self.bound or self.count > FLOW_MESSAGES):
            self.paused = True
            self._reader.pause()

    def sent(self, n):
        self.queued -= n
        self.count -= 1
        if self.paused and self.queued <= self.bound // 2 and self.count <= FLOW_MESSAGES // 2:
            self.paused = False
            self._reader.resume()


class Outbox:
    """Sends response messages on handle ``h``; ``log``: the module's BrokerLogger;
    ``watchers``: the ``watchers.Watchers`` that make its (shielded) handle watcher.

    A send that the socket refuses may have been partly written, and the connector keeps
    the rest for the next flux_send on the handle, whoever makes it (a log record, another
    module call): it would go out in place of that message. So a refused response is
    finished at once, blocking for the rest of this one message only, and the responses
    after it wait in the queue until the handle is writable again.
    """

    def __init__(self, h, log, watchers):
        self._h = h
        self._log = log
        self._queue = deque()  # (flux_msg_t *, Flow or None, size)
        self._congested = False
        self._watcher = watchers.handle(lib.FLUX_POLLOUT, self._flush, "outbox")

    def respond(self, msg, errnum, text):
        """Answer request ``msg`` with ``errnum`` and ``text`` (encoded JSON or an error
        text, bytes, or None), queued behind earlier responses. A response that cannot be
        built is logged."""
        resp = self._derive(msg, errnum)
        if resp is not None and (text is None or self._set(msg, resp, text)):
            self._post(resp, None, 0)

    def respond_output(self, msg, encoder, chunk, eof, flow):
        """Answer exec request ``msg`` with one ``output`` response: ``chunk`` (bytes; b""
        with ``eof``: the EOF alone), its JSON made by the stream's ``encoder``
        (``responses.OutputEncoder``) straight into the message. While queued, it counts
        in the stream's ``flow``."""
        resp = self._derive(msg, 0)
        if resp is not None:
            text = encoder.data(chunk, eof) if chunk else encoder.eof()
            if self._set(msg, resp, text):
                self._post(resp, flow, len(text))

    def _derive(self, msg, errnum):
        """The response message to ``msg``, or None: none is wanted, or it failed (logged)."""
        if lib.flux_msg_is_noresponse(msg.handle):
            return None
        resp = lib.flux_response_derive(msg.handle, errnum)
        if resp == ffi.NULL:
            self._log.error(f"error responding to {msg.topic}")
            return None
        return resp

    def _set(self, msg, resp, text):
        """Put ``text`` in ``resp``; False (logged, ``resp`` destroyed) if it would not go."""
        if lib.flux_msg_set_string(resp, text) == 0:
            return True
        self._log.error(f"error responding to {msg.topic}")
        lib.flux_msg_destroy(resp)
        return False

    def _post(self, resp, flow, size):
        """Send ``resp`` now, or queue it behind the others while the socket is full."""
        if not self._congested:
            self._send(resp)
            return
        self._queue.append((resp, flow, size))
        if flow is not None:
            flow.add(size)

    def _send(self, resp):
        """Send ``resp`` without waiting if the socket takes it; else finish it and wait
        for the handle to be writable before the next one."""
        h = self._h.handle
        if lib.flux_send(h, resp, lib.FLUX_O_NONBLOCK) < 0:
            code = ffi.errno
            if code in (errno.EAGAIN, errno.EWOULDBLOCK):
                self._congested = True
                self._watcher.start()
                code = 0 if lib.flux_send(h, resp, 0) == 0 else ffi.errno
            if code:
                self._log.error(f"error sending a response: {errno.errorcode.get(code, code)}")
        lib.flux_msg_destroy(resp)

    def _flush(self):
        self._congested = False
        while self._queue and not self._congested:
            resp, flow, size = self._queue.popleft()
            self._send(resp)
            if flow is not None:
                flow.sent(size)
        if not self._congested:
            self._watcher.stop()

    def close(self):
        """Send what is still queued, blocking (at unload), and stop watching."""
        self._watcher.stop()
        while self._queue:
            resp, _, _ = self._queue.popleft()
            if lib.flux_send(self._h.handle, resp, 0) < 0:
                self._log.error("error sending a response at unload")
            lib.flux_msg_destroy(resp)
        self._watcher.destroy()
