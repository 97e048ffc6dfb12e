"""The sdexec wire protocol, requests: payloads in, validated requests out.

With responses.py, the only module that knows the JSON keys of RFC 42 and
flux-core's sdexec (sdexec-protocol.md §2-4). Parsing raises RequestError with the errno a client
expects. Pure: stdlib only.
"""

import base64
import errno
import re
import signal
from dataclasses import dataclass, field

from flux_sdexec.core.errors import RequestError
from flux_sdexec.core.properties import PREFIX as PROP_PREFIX
from flux_sdexec.core.shelljobs import is_f58plain
from flux_sdexec.core.values import parse_idset, parse_size

FLAG_STDOUT = 1
FLAG_STDERR = 2
FLAG_CHANNEL = 4
FLAG_WRITE_CREDIT = 8
FLAG_WAITABLE = 16
LOCAL_FLAG_STDIO_FALLTHROUGH = 1
DEFAULT_BUFSIZE = 4 * 1024 * 1024  # libsubprocess' SUBPROCESS_DEFAULT_BUFSIZE

OPTIONS = (
    "SDEXEC_NAME",
    "SDEXEC_R_LOCAL",
    "SDEXEC_STOP_TIMER_SEC",
    "SDEXEC_STOP_TIMER_SIGNAL",
    "SDEXEC_TEST_EXPECTED_CPUS",
)
STREAMS = ("stdout", "stderr")
# systemd sets these itself for the unit (imp_exec_helper relies on its own INVOCATION_ID)
ENV_DROPPED = ("NOTIFY_SOCKET", "INVOCATION_ID")


@dataclass
class ExecRequest:
    """A validated ``sdexec.exec`` request."""

    cmdline: list
    env: dict
    cwd: str = None
    opts: dict = field(default_factory=dict)
    label: str = None
    background: bool = False
    waitable: bool = False
    streams: tuple = ()  # output streams to capture
    line_buffer: dict = field(default_factory=dict)
    bufsize: dict = field(default_factory=dict)
    stop_timer_sec: int = None
    stop_signal: int = signal.SIGKILL
    expected_cpus: str = None  # SDEXEC_TEST_EXPECTED_CPUS, checked after start (debug only)
    r_local: str = None  # SDEXEC_R_LOCAL: R to ask sdexec-mapper about before the start
    post_start_check: object = None  # what to verify once the pid is known (enforcement.py)


def _proto(text):
    return RequestError(errno.EPROTO, f"error parsing command object: {text}")


def _strings(obj, what):
    if not isinstance(obj, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in obj.items()
    ):
        raise _proto(f"{what} must be an object of strings")
    return obj


def _check_flags(flags, local_flags, background):
    if background:
        if flags & FLAG_WRITE_CREDIT:
            raise RequestError(errno.EINVAL, "write-credit flag is not allowed in background mode")
        if local_flags & LOCAL_FLAG_STDIO_FALLTHROUGH:
            raise RequestError(
                errno.EINVAL, "stdio-fallthrough flag is not allowed in background mode"
            )
        valid = FLAG_STDOUT | FLAG_STDERR | FLAG_CHANNEL | FLAG_WAITABLE
    else:
        if flags & FLAG_CHANNEL:
            raise RequestError(errno.EINVAL, "subprocess auxiliary channels are not supported yet")
        if flags & FLAG_WAITABLE:
            raise RequestError(errno.EINVAL, "waitable flag only supported in background mode")
        valid = FLAG_STDOUT | FLAG_STDERR
    if flags & ~valid:
        raise RequestError(errno.EINVAL, f"unsupported subprocess flags 0x{flags & ~valid:x}")


def _stream_options(opts):
    line_buffer, bufsize = {}, {}
    for stream in STREAMS:
        text = opts.get(f"{stream}_LINE_BUFFER", "true")
        if text.lower() not in ("true", "false"):
            raise RequestError(errno.EINVAL, f"{stream}_LINE_BUFFER: expected true or false")
        line_buffer[stream] = text.lower() == "true"
        text = opts.get(f"{stream}_BUFSIZE", "0")
        try:
            bufsize[stream] = parse_size(text) or DEFAULT_BUFSIZE
        except ValueError:
            raise RequestError(errno.EINVAL, f"{stream}_BUFSIZE: invalid size {text!r}") from None
    return line_buffer, bufsize


def _stop_timer(opts):
    sec = opts.get("SDEXEC_STOP_TIMER_SEC")
    if sec is not None:
        if not re.fullmatch(r"-?[0-9]+", sec):
            raise RequestError(errno.EINVAL, "SDEXEC_STOP_TIMER_SEC: expected an integer")
        sec = int(sec) if int(sec) >= 0 else None
    signum = opts.get("SDEXEC_STOP_TIMER_SIGNAL", str(int(signal.SIGKILL)))
    if not signum.isdigit() or not 0 < int(signum) < signal.NSIG:
        raise RequestError(errno.EINVAL, "SDEXEC_STOP_TIMER_SIGNAL: expected a signal number")
    return sec, int(signum)


def parse_exec(payload, streaming):
    """Validate an ``sdexec.exec`` payload.

    Args:
        payload: the decoded JSON payload.
        streaming: the request carried FLUX_MSGFLAG_STREAMING (else background mode).

    Raises:
        RequestError: EPROTO for a malformed payload, EINVAL for bad flags or options.
    """
    if not isinstance(payload, dict):
        raise RequestError(errno.EPROTO, "malformed exec request")
    cmd, flags = payload.get("cmd"), payload.get("flags")
    local_flags = payload.get("local_flags", 0)
    if not isinstance(cmd, dict) or type(flags) is not int or type(local_flags) is not int:
        raise RequestError(errno.EPROTO, "exec request needs cmd (object) and flags (integer)")
    background = not streaming
    _check_flags(flags, local_flags, background)
    cmdline = cmd.get("cmdline")
    if (
        not isinstance(cmdline, list)
        or not cmdline
        or not all(isinstance(a, str) for a in cmdline)
        or not cmdline[0]
    ):
        raise _proto("cmdline must be a non-empty array of strings")
    env = _strings(cmd.get("env", {}), "env")
    opts = _strings(cmd.get("opts", {}), "opts")
    cwd, label = cmd.get("cwd"), cmd.get("label")
    if cwd is not None and not isinstance(cwd, str):
        raise _proto("cwd must be a string")
    if label is not None and not isinstance(label, str):
        raise _proto("label must be a string")
    for key in opts:
        if key.startswith("SDEXEC_") and key not in OPTIONS and not key.startswith(PROP_PREFIX):
            raise RequestError(errno.EINVAL, f"{key}: unknown sdexec option")
    line_buffer, bufsize = _stream_options(opts)
    stop_timer_sec, stop_signal = _stop_timer(opts)
    expected_cpus = opts.get("SDEXEC_TEST_EXPECTED_CPUS")
    if expected_cpus is not None:
        try:
            parse_idset(expected_cpus)
        except ValueError:
            raise RequestError(errno.EINVAL, "SDEXEC_TEST_EXPECTED_CPUS: not an idset") from None
    if background:
        streams = STREAMS
    else:
        streams = tuple(s for s, f in zip(STREAMS, (FLAG_STDOUT, FLAG_STDERR)) if flags & f)
    return ExecRequest(
        cmdline=cmdline,
        env=env,
        cwd=cwd,
        opts=opts,
        label=label or None,
        background=background,
        waitable=bool(flags & FLAG_WAITABLE),
        streams=streams,
        line_buffer=line_buffer,
        bufsize=bufsize,
        stop_timer_sec=stop_timer_sec,
        stop_signal=stop_signal,
        expected_cpus=expected_cpus,
        r_local=opts.get("SDEXEC_R_LOCAL"),
    )


def unit_environment(env, flux_uri):
    """``K=V`` strings for the unit: acceptable names only (``[A-Za-z_][A-Za-z0-9_]*``, an
    ASCII identifier: no regex per variable), FLUX_URI set, systemd's own dropped."""
    merged = dict(env)
    merged["FLUX_URI"] = flux_uri
    return [
        f"{k}={v}"
        for k, v in merged.items()
        if k.isascii() and k.isidentifier() and k not in ENV_DROPPED
    ]


def parse_target(payload, verb):
    """``{pid, label?}`` of ``sdexec.kill``/``sdexec.wait``: returns (pid, label)."""
    if not isinstance(payload, dict):
        raise RequestError(errno.EPROTO, f"malformed {verb} request")
    pid, label = payload.get("pid"), payload.get("label")
    if type(pid) is not int or (label is not None and not isinstance(label, str)):
        raise RequestError(errno.EPROTO, f"malformed {verb} request")
    return pid, label or None


def parse_units(payload):
    """``{all?}`` of ``sdexec.units``: returns whether untracked units are asked for too."""
    if not isinstance(payload, dict) or set(payload) - {"all"}:
        raise RequestError(errno.EPROTO, "malformed units request")
    everything = payload.get("all", False)
    if not isinstance(everything, bool):
        raise RequestError(errno.EINVAL, "units: all must be true or false")
    return everything


def parse_kill(payload):
    """``sdexec.kill`` payload: returns (pid, label, signum)."""
    pid, label = parse_target(payload, "kill")
    signum = payload.get("signum")
    if type(signum) is not int or not 0 < signum < signal.NSIG:
        raise RequestError(errno.EINVAL, "kill: signum must be a signal number")
    return pid, label, signum


def parse_write(payload):
    """``sdexec.write`` payload: returns (matchtag, data bytes, eof)."""
    if not isinstance(payload, dict) or type(payload.get("matchtag")) is not int:
        raise RequestError(errno.EPROTO, "error decoding write request")
    io = payload.get("io")
    if not isinstance(io, dict) or not isinstance(io.get("stream"), str):
        raise RequestError(errno.EPROTO, "error decoding write request")
    if io["stream"] != "stdin":
        raise RequestError(errno.EINVAL, f"sdexec.write: {io['stream']} is an invalid stream")
    data = io.get("data", "")
    if not isinstance(data, str):
        raise RequestError(errno.EPROTO, "error decoding write request")
    try:
        raw = (
            base64.b64decode(data, validate=True)
            if io.get("encoding") == "base64"
            else data.encode()
        )
    except ValueError:
        raise RequestError(errno.EPROTO, "error decoding write request") from None
    return payload["matchtag"], raw, io.get("eof") is True


def parse_usage(payload):
    """``{jobid?}`` of ``sdexec.usage``: returns the job id asked for (f58plain), or None
    for every process."""
    if not isinstance(payload, dict):
        raise RequestError(errno.EPROTO, "malformed usage request")
    return payload.get("jobid")


def parse_usage_live(payload, default_wait, max_wait):
    """``{jobid, wait?}`` of ``sdexec.usage-live``: returns (jobid, wait), the job id an
    f58plain id that fits 64 bits, the wait in seconds in (0, ``max_wait``]."""
    if not isinstance(payload, dict):
        raise RequestError(errno.EPROTO, "malformed usage-live request")
    plain, wait = payload.get("jobid"), payload.get("wait", default_wait)
    if not is_f58plain(plain):
        raise RequestError(errno.EPROTO, f"usage-live: jobid {plain!r} is not an f58plain id")
    if isinstance(wait, bool) or not isinstance(wait, (int, float)):
        raise RequestError(errno.EPROTO, "usage-live: wait must be a number")
    if not 0 < wait <= max_wait:
        raise RequestError(errno.EPROTO, f"usage-live: wait must be in (0, {max_wait}]")
    return plain, wait
