"""Output buffering: line splitting for streamed output, a bounded tail for waits.

``OutputBuffer`` turns the bytes each read returns into the chunks sent as
output messages: one complete line per chunk in line mode, whatever the read
returned in raw mode. One line per message is what the clients need: libsubprocess'
remote client (remote.c ``remote_out_check_cb``) waits for a complete line but then
calls the output callback once per reactor turn, and ``flux exec`` (``output_cb``)
and bulk-exec (``exec_output_cb``) take everything buffered with
``flux_subprocess_read``: a message of many lines would get one ``--label-io``
prefix, one exec.eventlog entry (t0025 shows it). ``RetainedOutput`` keeps the newest
io objects of a waitable process. Pure: stdlib only.
"""

from collections import deque

DEFAULT_BUFSIZE = 4 * 1024 * 1024  # libsubprocess' SUBPROCESS_DEFAULT_BUFSIZE
RETAINED_OUTPUT_MAX = 8192


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


class RetainedOutput:
    """The newest io objects of a waitable process, at most ``limit`` data bytes.

    The oldest object goes first; a single object over the limit is kept whole.
    """

    __slots__ = ("limit", "_items", "_bytes")

    def __init__(self, limit=RETAINED_OUTPUT_MAX):
        self.limit = limit
        self._items = deque()
        self._bytes = 0

    def add(self, io, nbytes):
        """Keep ``io`` (an io object with data), whose decoded data is ``nbytes`` long."""
        self._items.append((io, nbytes))
        self._bytes += nbytes
        while self._bytes > self.limit and len(self._items) > 1:
            self._bytes -= self._items.popleft()[1]

    @property
    def items(self):
        """The retained io objects, oldest first."""
        return [io for io, _ in self._items]
