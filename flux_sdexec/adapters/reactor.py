"""The sdexec service on one flux handle: requests in, actions carried out.

Owns the flux side (responses, fd and timer watchers, the bus watcher) and
drives ``Proc`` state machines with what systemd and the channels report. Every
entry point catches everything (an exception escaping a watcher callback would
stop the module's reactor); this is the package's only broad ``except``.
"""

import errno
import json
import syslog

from _flux._core import ffi, lib
from flux.constants import FLUX_POLLIN

from flux_sdexec import containment, handoff, properties, protocol, unitstate
from flux_sdexec.adapters import cgroup, guard, teardown
from flux_sdexec.adapters.channels import InputChannel, OutputChannel
from flux_sdexec.adapters.mapper_client import MapperLookups
from flux_sdexec.adapters.sinks import output_sink
from flux_sdexec.adapters.systemd import SystemdBridge
from flux_sdexec.errors import RequestError, UnitError
from flux_sdexec.events import (
    ArmTimer,
    CancelTimer,
    ClientGone,
    CloseChannels,
    KillUnit,
    Log,
    OutputClosed,
    PostStartCheckFailed,
    Reap,
    ResetFailedUnit,
    Respond,
    RespondError,
    StartOutput,
    StopTimerExpired,
    StopUnit,
    UnitChanged,
    Unloading,
    WaitRequested,
    WaiterGone,
)
from flux_sdexec.linebuf import OutputBuffer
from flux_sdexec.proc import UNLOADING_TEXT, Proc
from flux_sdexec.registry import Registry
from flux_sdexec.states import ProcState

REMOTE_TEXT = "Remote sdexec requests are not allowed on rank 0"


def sender_of(msg):
    """The uuid of the client that sent ``msg`` (RFC 6 route), or None."""
    route = lib.flux_msg_route_first(msg.handle)
    return ffi.string(route).decode() if route != ffi.NULL else None


def matchtag_of(msg):
    tag = ffi.new("uint32_t [1]")
    lib.flux_msg_get_matchtag(msg.handle, tag)
    return tag[0]


def payload_of(msg, verb):
    """The decoded JSON payload, or RequestError(EPROTO)."""
    try:
        return msg.payload
    except (ValueError, TypeError):
        raise RequestError(errno.EPROTO, f"malformed {verb} request") from None


class Waiter:
    """A parked ``sdexec.wait`` request."""

    __slots__ = ("msg", "sender")

    def __init__(self, msg):
        self.msg = msg
        self.sender = sender_of(msg)


class Tracked:
    """One exec: its Proc plus the flux and socket resources around it."""

    def __init__(self, unit, proc, msg):
        self.unit = unit
        self.proc = proc
        self.msg = msg
        self.sender = sender_of(msg) if msg is not None else None
        self.matchtag = matchtag_of(msg) if msg is not None else None
        self.stdin = None
        self.outputs = {}
        self.timer = None
        self.expected_cpus = None  # checked once, when the pid is first seen

    @property
    def waiter_sender(self):
        return self.proc.waiter.sender if self.proc.waiter is not None else None


class SdexecService:
    """All of sdexec's behaviour on one broker rank.

    Args:
        handle: the module's flux handle.
        log: the module's BrokerLogger.
        rank: this broker's rank.
        local_uri: the broker's ``local-uri`` (FLUX_URI of every unit).
        namer: a ``naming.UnitNamer``.
        debug: ``[systemd] sdexec-debug``.
        unload_policy: ``[systemd] sdexec-unload``.
        broker_pid: the broker's pid, watched by the guard of handed-over units.
    """

    def __init__(
        self,
        handle,
        log,
        rank,
        local_uri,
        namer,
        debug=False,
        unload_policy=handoff.KEEP_WAITABLE,
        broker_pid=None,
    ):
        self.h = handle
        self.log = log
        self.rank = rank
        self.local_uri = local_uri
        self.namer = namer
        self.debug = debug
        self.unload_policy = unload_policy
        self.broker_pid = broker_pid
        self.guard = handoff.guard_unit(namer.instance, rank)
        self.registry = Registry()
        self.bridge = SystemdBridge(self._unit_changed, unitstate.TRACKED)
        self.bridge.open()
        self._bus_watcher = None
        self._watch_bus()
        self._pumping = False
        self._retry = None
        self.lookups = MapperLookups(
            handle, log, rank, self.serve, self._respond_error, sender_of, lambda: self.debug
        )
        guard.stop(self.bridge, self.log, self.guard)
        self._adopt_leftovers()

    # ---- systemd side ----

    def _watch_bus(self):
        if self._bus_watcher is not None:
            self._bus_watcher.stop()
            self._bus_watcher.destroy()
        self._bus_watcher = self.h.fd_watcher_create(
            self.bridge.fileno(), lambda *args: self.pump(), events=FLUX_POLLIN
        )
        self._bus_watcher.start()

    def pump(self):
        """Hand systemd's queued signals to their processes (also after every call)."""
        if self._pumping:
            return
        self._pumping = True
        try:
            self.bridge.pump()
        except UnitError as exc:
            if exc.errno == errno.ECONNRESET:
                self._reconnect()
            else:
                self.log.error(f"bus: {exc}")
        except Exception as exc:  # keep the reactor alive whatever a callback did
            self.log.error(f"bus: {exc!r}")
        finally:
            self._pumping = False

    def _reconnect(self, *args):
        """Open the bus again and catch up on every tracked unit; retry each second."""
        self.log.error("lost connection to systemd, reconnecting")
        self._bus_watcher.stop()
        try:
            self.bridge.reconnect()
        except UnitError as exc:
            self.log.error(f"reconnect: {exc}, retrying in 1s")
            self._retry = self.h.timer_watcher_create(1.0, self._reconnect)
            self._retry.start()
            return
        self._watch_bus()
        for t in self.registry:
            try:
                self._unit_changed(t.unit, self.bridge.get_unit_properties(t.unit))
            except UnitError as exc:
                self.log.error(f"{t.unit}: {exc}")

    def _unit_changed(self, unit, props):
        t = self.registry.by_unit(unit)
        if t is None:
            return
        if self.debug:
            state = f"{props.get('ActiveState', '-')}.{props.get('SubState', '-')}"
            self.log.debug(f"{unit}: {state} {json.dumps(props, default=str)[:200]}")
        if t.proc.waiter is not None and props.get("ExecMainCode"):
            self._drain(t)
        if t.expected_cpus is not None and props.get("ExecMainPID"):
            expected, t.expected_cpus = t.expected_cpus, None
            problem = cgroup.check_allowed_cpus(props["ExecMainPID"], expected)
            if problem is not None:
                self._feed(t, PostStartCheckFailed(problem))
        self._feed(t, UnitChanged(props))

    def _adopt_leftovers(self):
        """Track the units a crashed predecessor left running, as background waitables."""
        for unit, _, _ in self.bridge.list_units([self.namer.glob]):
            ours, label = self.namer.parse(unit)
            if not ours:
                continue  # another rank's (or a verbatim SDEXEC_NAME): not ours to touch
            try:
                props = self.bridge.get_unit_properties(unit)
                if label is not None and self.registry.has_label(label):
                    raise RequestError(errno.EEXIST, f"label {label} is already tracked")
                exec_start = props.get("ExecStart") or [(unit, [unit])]
                proc = Proc(
                    unit,
                    list(exec_start[0][1]) or [unit],
                    label=label,
                    background=True,
                    waitable=True,
                    adopted=True,
                )
                t = Tracked(unit, proc, None)
                self.registry.add(t)
                self.bridge.watch(unit)
                self._feed(t, UnitChanged(props))
                self.log.info(f"adopted {unit} ({proc.status.state}, pid {proc.pid})")
            except OSError as exc:
                self.log.error(f"{unit}: cannot adopt ({exc}), stopping it")
                teardown.quietly(self.log, self.bridge.stop_unit, unit)
                teardown.quietly(self.log, self.bridge.reset_failed_unit, unit)
        self.pump()

    # ---- the state machine ----

    def _feed(self, t, event):
        try:
            actions = t.proc.handle(event)
        except Exception as exc:
            self.log.error(f"{t.unit}: {type(event).__name__}: {exc!r}")
            return
        for action in actions:
            try:
                self._apply(t, action)
            except Exception as exc:
                self.log.error(f"{t.unit}: {type(action).__name__}: {exc!r}")
        if t.proc.state is ProcState.DONE:
            self.registry.remove(t)

    def _apply(self, t, a):
        kind = type(a)
        if kind is Respond:
            self._respond(a.to.msg if a.to else t.msg, a.payload)
        elif kind is RespondError:
            self._respond_error(a.to.msg if a.to else t.msg, a.errnum, a.text)
        elif kind is StartOutput:
            for channel in t.outputs.values():
                channel.start()
        elif kind is CloseChannels:
            self._close_channels(t)
        elif kind is StopUnit:
            self._systemd(t, "stop", self.bridge.stop_unit, t.unit)
        elif kind is ResetFailedUnit:
            self._systemd(t, "reset-failed", self.bridge.reset_failed_unit, t.unit)
        elif kind is KillUnit:
            self._systemd(
                t, f"kill main (signal {a.signum})", self.bridge.kill_unit, t.unit, a.signum
            )
        elif kind is ArmTimer:
            self._arm_timer(t, a.seconds)
        elif kind is CancelTimer:
            if t.timer is not None:
                t.timer.stop()
        elif kind is Log:
            self.log(a.level, a.text)
        elif kind is Reap:
            self._release(t)

    def _systemd(self, t, what, call, *args):
        if self.debug:
            self.log.debug(f"{what} {t.unit}")
        try:
            call(*args)
        except UnitError as exc:
            quiet = t.proc.status.gone or exc.errno in (errno.ENOENT, errno.ESRCH)
            self.log(syslog.LOG_DEBUG if quiet else syslog.LOG_ERR, f"{what} {t.unit}: {exc}")

    def _arm_timer(self, t, seconds):
        if t.timer is None:
            t.timer = self.h.timer_watcher_create(
                seconds, lambda *args: self._feed(t, StopTimerExpired()) or self.pump()
            )
        t.timer.reset(after=seconds)

    def _release(self, t):
        self.bridge.unwatch(t.unit)
        if t.timer is not None:
            t.timer.stop()
            t.timer.destroy()
            t.timer = None
        self._close_channels(t)

    def _close_channels(self, t):
        for channel in (t.stdin, *t.outputs.values()):
            if channel is not None:
                channel.close()

    # ---- responses ----

    def _respond(self, msg, payload=None):
        text = json.dumps(payload).encode() if payload is not None else ffi.NULL
        if lib.flux_respond(self.h.handle, msg.handle, text) < 0:
            self.log.error(f"error responding to {msg.topic}")

    def _respond_error(self, msg, errnum, text=None):
        ctext = text.encode() if text else ffi.NULL
        if lib.flux_respond_error(self.h.handle, msg.handle, errnum, ctext) < 0:
            self.log.error(f"error responding to {msg.topic}")

    def serve(self, msg, verb, func, remote_ok=False):
        """Run ``func(msg)`` for a request, turning any failure into one error response."""
        try:
            if not remote_ok and self.rank == 0 and not msg.rolemask & lib.FLUX_ROLE_LOCAL:
                raise RequestError(errno.EPERM, REMOTE_TEXT)
            func(msg)
        except OSError as exc:
            self._respond_error(msg, exc.errno or errno.EINVAL, exc.strerror or str(exc))
        except Exception as exc:
            self.log.error(f"{verb}: {exc!r}")
            self._respond_error(msg, errno.EINVAL, f"{verb}: internal error: {exc}")
        self.pump()

    # ---- requests ----

    def exec(self, msg):
        """``sdexec.exec``: validate, map resources if asked, then start the unit."""
        req = protocol.parse_exec(payload_of(msg, "exec"), lib.flux_msg_is_streaming(msg.handle))
        if req.r_local is not None:
            self.lookups.lookup(msg, req, self._start)
        else:
            self._start(msg, req)

    def _start(self, msg, req):
        """Name and start the unit; responses follow from signals. Returns the unit name."""
        if req.label and self.registry.has_label(req.label):
            raise RequestError(errno.EEXIST, "command label is not unique")
        unit = self.namer.name(req.label, req.opts.get("SDEXEC_NAME"))
        if self.registry.by_unit(unit) is not None:
            raise RequestError(errno.EEXIST, f"unit {unit} is already in use")
        proc = Proc(
            unit,
            req.cmdline,
            label=req.label,
            background=req.background,
            waitable=req.waitable,
            streams=req.streams,
            stop_timer_sec=req.stop_timer_sec,
            stop_signal=req.stop_signal,
        )
        t = Tracked(unit, proc, msg)
        t.expected_cpus = containment.expected_cpus(req, self.debug)
        try:
            self._open_channels(t, req)
            environment = protocol.unit_environment(req.env, self.local_uri)
            fds = {s: c.remote_fd() for s, c in t.outputs.items()}
            if t.stdin is not None:
                fds["stdin"] = t.stdin.remote_fd()
            props = properties.start_properties(req.cmdline, req.cwd, environment, fds, req.opts)
            self.registry.add(t)
            self.bridge.watch(unit)
            if self.debug:
                self.log.debug(f"start {unit}")
            self.bridge.start_transient_unit(unit, props)
        except BaseException as exc:
            self._release(t)
            self.registry.remove(t)
            if isinstance(exc, UnitError) and exc.errno == errno.EROFS:
                raise UnitError(errno.EINVAL, exc.strerror) from None  # unknown property
            raise
        for channel in (t.stdin, *t.outputs.values()):
            if channel is not None:
                channel.release_remote()
        return unit

    def _open_channels(self, t, req):
        if not req.background:
            t.stdin = InputChannel(self.h, self.log, t.proc.logname)
        for stream in req.streams:
            t.outputs[stream] = OutputChannel(
                self.h,
                stream,
                OutputBuffer(req.line_buffer[stream], req.bufsize[stream]),
                output_sink(self.h, self.log, t.proc, t.msg, stream, str(self.rank)),
                lambda s, t=t: self._feed(t, OutputClosed(s)),
                self.log,
            )

    def write(self, msg):
        """``sdexec.write``: stdin data for a foreground process; never answered."""
        try:
            if not lib.flux_msg_is_noresponse(msg.handle):
                raise RequestError(errno.EPROTO, "write request is missing NORESPONSE flag")
            matchtag, data, eof = protocol.parse_write(payload_of(msg, "write"))
            t = self.registry.by_request(sender_of(msg), matchtag)
            if t is None:
                raise RequestError(errno.ESRCH, "sdexec.write: subprocess no longer exists")
            if t.stdin is None:
                raise RequestError(
                    errno.EINVAL, "sdexec.write: stdin is closed for a background process"
                )
            t.stdin.write(data, eof)
        except OSError as exc:
            self.log.error(str(exc))
        except Exception as exc:
            self.log.error(f"write: {exc!r}")

    def kill(self, msg):
        """``sdexec.kill``: KillUnit(main, signum) on a tracked process."""
        pid, label, signum = protocol.parse_kill(payload_of(msg, "kill"))
        t = self._find(pid, label, "kill")
        if self.debug:
            self.log.debug(f"kill main {t.unit} (signal {signum})")
        self.bridge.kill_unit(t.unit, signum)
        self._respond(msg)

    def wait(self, msg):
        """``sdexec.wait``: a waitable process's status, now or when it ends."""
        pid, label = protocol.parse_target(payload_of(msg, "wait"), "wait")
        t = self._find(pid, label, "wait")
        if not t.proc.waitable:
            raise RequestError(errno.EINVAL, "process is not waitable")
        if t.proc.waiter is not None:
            raise RequestError(errno.EINVAL, "process is already being waited on")
        if t.proc.state is ProcState.ZOMBIE:
            self._drain(t)
        self._feed(t, WaitRequested(Waiter(msg)))

    def _drain(self, t):
        """Complete the retained output of an exited process before a wait is answered."""
        for channel in t.outputs.values():
            channel.drain()

    def _find(self, pid, label, verb):
        t = self.registry.find(pid, label)
        if t is None:
            target = f"label={label}" if label is not None else f"pid={pid}"
            raise RequestError(errno.ESRCH, f"{verb} {target} not found")
        return t

    def list(self, msg):
        """``sdexec.list``: every tracked process, in start order."""
        procs = [
            protocol.list_entry(
                t.proc.pid,
                t.proc.cmdline[0],
                t.proc.label,
                t.proc.status.code is not None or t.proc.state is ProcState.ZOMBIE,
            )
            for t in self.registry
            if t.proc.visible
        ]
        self._respond(msg, {"rank": self.rank, "procs": procs})

    def stats(self, msg):
        """``sdexec.stats-get``: per-unit state and channel fds."""
        procs = {}
        for t in self.registry:
            procs[t.unit] = {
                "state": t.proc.status.state,
                "pid": t.proc.pid,
                "in": t.stdin.stats() if t.stdin else None,
                "out": t.outputs["stdout"].stats() if "stdout" in t.outputs else None,
                "err": t.outputs["stderr"].stats() if "stderr" in t.outputs else None,
            }
        self._respond(msg, {"procs": procs})

    def disconnect(self, msg):
        """RFC 6 disconnect: kill the client's foreground units, drop its parked waits."""
        sender = sender_of(msg)
        self.lookups.cancel(sender)
        for t in self.registry.by_sender(sender):
            if t.sender == sender and t.proc.state is not ProcState.ZOMBIE:
                self._feed(t, ClientGone())
            if t.waiter_sender == sender:
                self._feed(t, WaiterGone())
        self.pump()

    def unload(self, broker_state):
        """Answer what is owed with ENOSYS and stop every unit still running, except
        those handed over to the next sdexec (``handoff.units_to_keep``).

        Args:
            broker_state: the local broker's state-machine state, None when unknown.
        """
        keep = handoff.units_to_keep(
            (t.proc for t in self.registry), self.unload_policy, broker_state
        )
        if not handoff.instance_stays(self.unload_policy, broker_state) and len(self.registry):
            self.log.info(
                f"unload ({self.unload_policy}, broker state {broker_state}): stopping every unit"
            )
        self.lookups.cancel_all(errno.ENOSYS, UNLOADING_TEXT)
        units = [t.unit for t in self.registry if not t.proc.status.gone and t.unit not in keep]
        for t in self.registry:
            self._feed(t, Unloading(keep=t.unit in keep))
        try:
            if keep and self.broker_pid is not None:
                guard.start(self.bridge, self.log, self.guard, self.broker_pid, keep)
            teardown.see_units_gone(self.bridge, self.log, units)
        except UnitError as exc:
            self.log.error(f"unload: {exc}")
        self.bridge.close()
