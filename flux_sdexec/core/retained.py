"""The retained output of a waitable process: its newest io objects, for the wait's answer.

A waitable (background) process's output is logged as it comes; the wait's answer carries
the tail of it, at most RETAINED_OUTPUT_MAX data bytes. Pure: stdlib only.
"""

from collections import deque

RETAINED_OUTPUT_MAX = 8192


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
