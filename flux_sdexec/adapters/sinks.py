"""Where each output chunk goes: streamed to the client, or logged and retained.

The per-line hot path: a foreground chunk costs one string escape and one
``flux_respond``; a background chunk one broker log record (and, for a waitable
process, one retained io object).
"""

import syslog

from _flux._core import lib

from flux_sdexec import protocol


def output_sink(handle, log, proc, msg, stream, rank):
    """The ``on_chunk(chunk, eof)`` callback of one output stream of ``proc``.

    Args:
        handle: the module's flux handle.
        log: the module's BrokerLogger.
        proc: the Proc (its pid, logname, background flag and retained tail are read).
        msg: the exec request that output responses answer.
        stream: ``stdout`` or ``stderr``.
        rank: this broker's rank, as a string.
    """
    if not proc.background:
        encoder = None

        def stream_chunk(chunk, eof):
            nonlocal encoder
            if encoder is None:  # built at the first chunk: the pid is known by then
                encoder = protocol.OutputEncoder(stream, rank, proc.pid)
            text = encoder.data(chunk, eof) if chunk else encoder.eof()
            lib.flux_respond(handle.handle, msg.handle, text.encode())

        return stream_chunk
    level = syslog.LOG_INFO if stream == "stdout" else syslog.LOG_ERR

    def log_chunk(chunk, eof):
        if not chunk:
            return
        text = chunk.decode(errors="replace").removesuffix("\n")
        log(level, f"{proc.logname}[{proc.pid}]: {text}")
        if proc.retained is not None:
            proc.retained.add(protocol.io_object(stream, rank, chunk, eof), len(chunk))

    return log_chunk
