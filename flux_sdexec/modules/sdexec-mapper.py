"""sdexec-mapper: a job's resources to systemd unit properties, for sdexec's containment.

Serves ``sdexec-mapper.lookup`` (``{"R": R}`` in, a dict of property strings out),
``stats-get`` and ``config-reload``. rc1 loads it with sdexec when ``[systemd] enable``
and ``exec.sdexec-constrain-resources`` are set; to use this module rather than
flux-core's, name it in ``[modules]``::

    [modules]
    sdexec-mapper.module = "/path/to/flux_sdexec/modules/sdexec-mapper.py"

Only wiring lives here; the logic is
``flux_sdexec.containment.mapper.mapper_service.MapperService``.
"""

import errno
import signal
import sys
from pathlib import Path

# Run from a checkout, this file sits inside its own package: import that package,
# not another installed copy (as modules/sdexec.py does).
_ROOT = Path(__file__).resolve().parents[2]
if (_ROOT / "flux_sdexec" / "__init__.py").is_file():
    sys.path.insert(0, str(_ROOT))

from flux.brokermod import BrokerModule, request_handler  # noqa: E402

from flux_sdexec.containment.mapper.mapper_service import MapperService  # noqa: E402


class SdexecMapperModule(BrokerModule):
    """The sdexec-mapper broker module."""

    def __init__(self, h, *args):
        super().__init__(h, *args)
        try:
            self.service = MapperService(h.get_rank(), h.conf_get() or {}, self._topology)
        except ValueError as exc:  # the loader reports only the errno: say why in the log
            self.log.error(f"cannot start: {exc}")
            raise OSError(errno.EINVAL, str(exc)) from None
        # the broker SIGTERMs a module still loaded at exit: stop cleanly then too
        self._sigterm = h.signal_watcher_create(signal.SIGTERM, lambda *args: self.stop())
        self._sigterm.start()

    def _topology(self):
        return self.handle.rpc("resource.topo-get").get_str()

    def _answer(self, msg, verb, func):
        try:
            self.handle.respond(msg, func())
        except OSError as exc:
            self.log.error(f"{verb} failed: {exc.strerror or exc}")
            self.handle.respond_error(msg, exc.errno or errno.EINVAL, exc.strerror or str(exc))
        except Exception as exc:  # a site's mapper may raise anything: fail the RPC only
            self.log.error(f"{verb} failed: {exc}")
            self.handle.respond_error(msg, errno.EINVAL, str(exc))

    @request_handler("lookup")
    def lookup(self, msg):
        def run():
            payload = msg.payload
            if not isinstance(payload, dict) or "R" not in payload:
                raise OSError(errno.EPROTO, "lookup request needs an R")
            return self.service.lookup(payload["R"])

        self._answer(msg, "lookup", run)

    @request_handler("stats-get")
    def stats_get(self, msg):
        self._answer(msg, "stats-get", self.service.stats)

    @request_handler("config-reload")
    def config_reload(self, msg):
        def run():
            conf = msg.payload
            if not isinstance(conf, dict):
                raise OSError(errno.EPROTO, "Error unpacking config-reload request")
            self.service.reconfigure(conf)

        self._answer(msg, "config-reload", run)
