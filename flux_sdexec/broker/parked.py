"""Requests parked until something happens, each answered exactly once.

A parked request ends one way only. Its turn comes (``take``), and its owner carries it
on. Or its client's disconnect (``cancel``) or the module's unload (``cancel_all``)
answers it with an error, and nothing more is done. The owner's own data rides along
with each request. No flux import: the owner gives the way to answer.
"""

import errno

DISCONNECT_TEXT = "client disconnected before the unit was started"


class ParkedRequests:
    """Requests keyed by what each waits for, in the order they were parked.

    Args:
        respond_error: ``respond_error(msg, errnum, text)``.
        sender_of: the client uuid of a message; None when no disconnect cancels them.
    """

    def __init__(self, respond_error, sender_of=None):
        self._respond_error = respond_error
        self._sender_of = sender_of
        self._parked = {}  # key -> (msg, sender, data)

    def __len__(self):
        return len(self._parked)

    def __contains__(self, key):
        return key in self._parked

    def park(self, key, msg, data=None):
        """Park ``msg`` under ``key``, with the owner's ``data``."""
        sender = self._sender_of(msg) if self._sender_of is not None else None
        self._parked[key] = (msg, sender, data)

    def take(self, key):
        """``(msg, data)`` of the request parked under ``key``, no longer parked; None when
        none is (it was answered already)."""
        entry = self._parked.pop(key, None)
        return None if entry is None else (entry[0], entry[2])

    def data(self):
        """The data of every parked request."""
        return [data for _, _, data in self._parked.values()]

    def cancel(self, sender):
        """A client disconnected: answer its parked requests, carry none on."""
        for key, (msg, who, _) in list(self._parked.items()):
            if who == sender:
                del self._parked[key]
                self._respond_error(msg, errno.ECONNRESET, DISCONNECT_TEXT)

    def cancel_all(self, errnum, text):
        """The module is unloading: answer every parked request with ``errnum``."""
        parked, self._parked = self._parked, {}
        for msg, _, _ in parked.values():
            self._respond_error(msg, errnum, text)
