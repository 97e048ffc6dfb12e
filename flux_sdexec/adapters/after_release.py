"""Exec requests waiting for their unit name, held by a record that is being let go.

A unit's name is its label's (naming.py), and a record whose status a wait has already
given keeps its unit loaded a little while (the answer grace, a revived record's hold,
the stop itself: waits.py). Its label is free at once for a new exec, as in flux-core's
C module: the old record is let go, and the new exec waits here, in start order, until
systemd has forgotten the old unit; then it starts. Each waiting request ends exactly
once: it starts (``proceed``, through ``serve``), or its client's disconnect or the
module's unload answers it with an error. No flux import: the service wires it.
"""

import errno

DISCONNECT_TEXT = "client disconnected before the unit was started"


class StartsAfterRelease:
    """The exec requests of one sdexec waiting for a unit name.

    Args:
        serve: ``serve(msg, verb, func)`` runs ``func(msg)`` and turns an exception into
            the request's one error response (SdexecService.serve).
        respond_error: ``respond_error(msg, errnum, text)``.
        sender_of: the client uuid of a message.
    """

    def __init__(self, serve, respond_error, sender_of):
        self._serve = serve
        self._respond_error = respond_error
        self._sender_of = sender_of
        self._waiting = {}  # unit -> (msg, sender, label, proceed)

    def __len__(self):
        return len(self._waiting)

    def wait(self, unit, msg, label, proceed):
        """Start ``proceed(msg)`` once ``unit`` is gone (``gone(unit)``)."""
        self._waiting[unit] = (msg, self._sender_of(msg), label, proceed)

    def has(self, unit=None, label=None):
        """A request waits for ``unit``, or one labelled ``label`` waits."""
        if unit is not None and unit in self._waiting:
            return True
        return label is not None and any(e[2] == label for e in self._waiting.values())

    def gone(self, unit):
        """systemd has forgotten ``unit``: the request waiting for it starts now."""
        entry = self._waiting.pop(unit, None)
        if entry is not None:
            msg, _, _, proceed = entry
            self._serve(msg, "exec", proceed)

    def cancel(self, sender):
        """A client disconnected: answer its waiting requests, start nothing."""
        for unit, (msg, who, _, _) in list(self._waiting.items()):
            if who == sender:
                del self._waiting[unit]
                self._respond_error(msg, errno.ECONNRESET, DISCONNECT_TEXT)

    def cancel_all(self, errnum, text):
        """The module is unloading: answer every waiting request."""
        waiting, self._waiting = self._waiting, {}
        for msg, _, _, _ in waiting.values():
            self._respond_error(msg, errnum, text)
