"""sdexec: run commands as systemd transient units (the RFC 42 subprocess service).

Load it in place of flux-core's C module; its directory goes first on
FLUX_MODULE_PATH_PREPEND, or a site names this file in ``[modules]``::

    [systemd]
    enable = true
    [modules]
    sdexec.module = "/path/to/flux_sdexec/modules/sdexec.py"

Only wiring lives here: each handler hands its message to
``flux_sdexec.broker.requests.Requests`` through ``SdexecService.serve``.
"""

import errno
import os
import signal
import sys
from pathlib import Path

# Run from a checkout (make demo, the tests), this file sits inside its own package:
# import that package, not another installed copy. Installed by `make install`, it
# sits alone and the package comes from site-packages.
_ROOT = Path(__file__).resolve().parents[2]
if (_ROOT / "flux_sdexec" / "__init__.py").is_file():
    sys.path.insert(0, str(_ROOT))

from flux.brokermod import BrokerModule, event_handler, request_handler  # noqa: E402

from flux_sdexec.config import Config  # noqa: E402
from flux_sdexec.core import naming  # noqa: E402
from flux_sdexec.core.handoff import JOB_EXEC_LOADED  # noqa: E402
from flux_sdexec.broker.brokerstate import broker_state  # noqa: E402
from flux_sdexec.broker.service import SdexecService  # noqa: E402
from flux_sdexec.broker.watchers import shielded  # noqa: E402

# rank 0 answers in milliseconds; a follower in rc1 once waited forever for it (3 nodes)
UUID_TIMEOUT = 30.0


def _attr(handle, name, default=None):
    try:
        return handle.attr_get(name)
    except OSError:
        return default


class SdexecModule(BrokerModule):
    """The sdexec broker module."""

    def __init__(self, h, *args):
        super().__init__(h, *args)
        rank = h.get_rank()
        try:
            namer = naming.UnitNamer(self._instance(h, rank), rank, self._rank_suffix(h))
            config = Config.parse(h.conf_get() or {})
            self.service = SdexecService(
                h,
                self.log,
                rank,
                h.attr_get("local-uri"),
                namer,
                config=config,
                broker_pid=_attr(h, "broker.pid"),
                module_file=str(Path(__file__).resolve()),
                # flux-core's rc1 cancels no running job at shutdown: they outlive it
                jobs_outlive_shutdown="FLUX_DISABLE_JOB_CLEANUP" in os.environ,
            )
        except OSError as exc:  # the loader reports only the errno: say why in the log
            self.log.error(f"cannot start: {exc}")
            raise
        self.requests = self.service.requests
        self.log.info(f"units named <label>:{namer.instance}.service (glob {namer.glob})")
        self.log.info(f"systemd reached through {self.service.bridge.via}")
        # the broker SIGTERMs a module still loaded at exit: unload cleanly then too
        self._sigterm = self.service.watchers.signal(signal.SIGTERM, self.stop, "SIGTERM")
        self._sigterm.start()

    def _instance(self, h, rank):
        system = _attr(h, "broker.sd-notify") is not None
        jobid_path = _attr(h, "jobid-path", "/")
        uuid = _attr(h, "broker.uuid", "")
        if rank != 0 and naming.needs_instance_uuid(jobid_path, system):
            try:
                uuid = (
                    h.rpc("attr.get", {"name": "broker.uuid"}, nodeid=0)
                    .wait_for(UUID_TIMEOUT)
                    .get()["value"]
                )
            except OSError as exc:
                self.log.warning(f"broker.uuid of rank 0: {exc}; using this rank's")
        return naming.render_instance(jobid_path, system, uuid)

    def _rank_suffix(self, h):
        return naming.needs_rank_suffix(_attr(h, "broker.mapping"))

    def run(self):
        try:
            super().run()
        finally:
            self.service.unload(broker_state(self.handle, self.log))

    @request_handler("exec")
    def exec_(self, msg):
        self.service.serve(msg, "exec", self.requests.exec)

    @request_handler("write")
    def write(self, msg):
        self.requests.write(msg)

    @request_handler("kill")
    def kill(self, msg):
        self.service.serve(msg, "kill", self.requests.kill)

    @request_handler("wait")
    def wait(self, msg):
        self.service.serve(msg, "wait", self.requests.wait)

    @request_handler("list")
    def list_(self, msg):
        self.service.serve(msg, "list", self.requests.list)

    @request_handler("stats-get")
    def stats_get(self, msg):
        self.service.serve(msg, "stats-get", self.requests.stats, remote_ok=True)

    @request_handler("units")
    def units(self, msg):
        self.service.serve(msg, "units", self.requests.units, remote_ok=True)

    @request_handler("usage")
    def usage(self, msg):
        self.service.serve(msg, "usage", self.requests.usage, remote_ok=True)

    @request_handler("usage-live")
    def usage_live(self, msg):
        self.service.serve(msg, "usage-live", self.requests.usage_live, remote_ok=True)

    @request_handler("usage-gather")
    def usage_gather(self, msg):
        self.service.serve(msg, "usage-gather", self.requests.usage_gather, remote_ok=True)

    @request_handler("disconnect")
    def disconnect(self, msg):
        shielded(self.log, "disconnect", self.requests.disconnect)(msg)  # never answered

    @event_handler(JOB_EXEC_LOADED, prefix=False)
    def job_exec_loaded(self, msg):
        """Published by ``flux sdexec upgrade`` once job-exec is loaded again."""
        shielded(self.log, JOB_EXEC_LOADED, self.requests.start_claims)("job-exec loaded")

    @request_handler("config-reload")
    def config_reload(self, msg):
        self.service.serve(msg, "config-reload", self._reconfigure, remote_ok=True)

    def _reconfigure(self, msg):
        try:
            conf = msg.payload
        except (ValueError, TypeError):
            conf = None
        if not isinstance(conf, dict):
            raise OSError(errno.EPROTO, "Error unpacking config-reload request")
        self.service.reconfigure(conf)
        self.handle.respond(msg)
