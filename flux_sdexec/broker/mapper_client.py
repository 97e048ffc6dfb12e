"""sdexec's side of containment: ask sdexec-mapper before a start, without blocking.

A command with ``SDEXEC_R_LOCAL`` waits here while its lookup is in flight;
everything else sdexec serves meanwhile. Each pending lookup ends exactly once:
the reply continues the start (``proceed``), or the client's disconnect or the
module's unload answers it with an error and nothing is started.
"""

import errno
import json

from flux_sdexec.broker.parked import ParkedRequests
from flux_sdexec.containment.lookup import LOOKUP_TOPIC, apply, lookup_error, lookup_payload
from flux_sdexec.broker.watchers import shielded
from flux_sdexec.core.errors import RequestError

LOOKUP_WHAT = "sdexec-mapper.lookup"


class MapperLookups(ParkedRequests):
    """Pending ``sdexec-mapper.lookup`` RPCs of one sdexec, their requests parked by future
    (``cancel`` and ``cancel_all`` answer them: parked.py).

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
        super().__init__(respond_error, sender_of)
        self.h = handle
        self.log = log
        self.rank = rank
        self._debug = debug
        self._serve = serve

    def lookup(self, msg, req, proceed):
        """Send the lookup for ``req``; ``proceed(msg, req)`` starts the unit once mapped."""
        future = self.h.rpc(LOOKUP_TOPIC, lookup_payload(req), self.rank, 0)
        self.park(future, msg, (req, proceed))
        future.then(shielded(self.log, LOOKUP_WHAT, self._mapped))  # a reactor callback

    def _mapped(self, future):
        entry = self.take(future)
        if entry is None:  # answered already (disconnect)
            if self._debug():
                self.log.debug("sdexec-mapper.lookup answered after its request ended")
            return
        msg, (req, proceed) = entry

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
