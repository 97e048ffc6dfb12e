"""sdexec's side of containment: ask sdexec-mapper before a start, without blocking.

A command with ``SDEXEC_R_LOCAL`` waits here while its lookup is in flight;
everything else sdexec serves meanwhile. Each pending lookup ends exactly once:
the reply continues the start (``proceed``), or the client's disconnect or the
module's unload answers it with an error and nothing is started.
"""

import errno
import json

from flux_sdexec.containment.lookup import LOOKUP_TOPIC, apply, lookup_error, lookup_payload
from flux_sdexec.broker.watchers import guarded
from flux_sdexec.core.errors import RequestError

DISCONNECT_TEXT = "client disconnected before the unit was started"
LOOKUP_WHAT = "sdexec-mapper.lookup"


class MapperLookups:
    """Pending ``sdexec-mapper.lookup`` RPCs of one sdexec.

    Args:
        handle: the module's flux handle.
        log: the module's logger.
        rank: this broker's rank: the lookup goes to its mapper only (with
            FLUX_NODEID_ANY a rank without one would be answered by an upstream
            rank's mapper, which maps nothing of another rank's R: unconstrained).
        serve: ``SdexecService.serve``-like: ``serve(msg, verb, func)`` runs ``func(msg)``
            and turns an exception into the request's one error response.
        respond_error: ``respond_error(msg, errnum, text)``.
        sender_of: the client uuid of a message.
        debug: returns ``[systemd] sdexec-debug`` (log each start's mapped properties).
    """

    def __init__(self, handle, log, rank, serve, respond_error, sender_of, debug):
        self.h = handle
        self.log = log
        self.rank = rank
        self._debug = debug
        self._serve = serve
        self._respond_error = respond_error
        self._sender_of = sender_of
        self._pending = {}  # future -> (msg, sender, req, proceed)

    def __len__(self):
        return len(self._pending)

    def lookup(self, msg, req, proceed):
        """Send the lookup for ``req``; ``proceed(msg, req)`` starts the unit once mapped."""
        future = self.h.rpc(LOOKUP_TOPIC, lookup_payload(req), self.rank, 0)
        self._pending[future] = (msg, self._sender_of(msg), req, proceed)
        future.then(guarded(self.log, LOOKUP_WHAT, self._mapped))  # a reactor callback

    def _mapped(self, future):
        entry = self._pending.pop(future, None)
        if entry is None:  # answered already (disconnect)
            if self._debug():
                self.log.debug("sdexec-mapper.lookup answered after its request ended")
            return
        msg, _, req, proceed = entry

        def resume(msg):
            try:
                mapped = future.get()
            except OSError as exc:
                raise lookup_error(exc.errno, exc.strerror or str(exc)) from None
            except json.JSONDecodeError:
                raise RequestError(errno.EPROTO, "sdexec-mapper.lookup: reply is not JSON")
            apply(req, mapped)
            unit = proceed(msg, req)
            if self._debug():
                self.log.debug(f"{unit}: started with mapped properties {json.dumps(mapped)}")

        self._serve(msg, "exec", resume)

    def cancel(self, sender):
        """A client disconnected: answer its pending lookups, start nothing."""
        for future, (msg, who, _, _) in list(self._pending.items()):
            if who == sender:
                del self._pending[future]
                self._respond_error(msg, errno.ECONNRESET, DISCONNECT_TEXT)

    def cancel_all(self, errnum, text):
        """The module is unloading: answer every pending lookup."""
        pending, self._pending = self._pending, {}
        for msg, _, _, _ in pending.values():
            self._respond_error(msg, errnum, text)
