"""Where each output chunk goes: streamed to the client, or handed to the core.

A foreground chunk is the per-line hot path and carries no decision: it costs one
string escape and one ``flux_respond`` and never touches the state machine. A
background chunk is an ``OutputChunk`` input: the core logs it and keeps it for a
wait.
"""

from flux_sdexec.core import responses
from flux_sdexec.core.events import OutputChunk


def output_sink(responder, p, stream, rank, feed, flow=None):
    """The ``on_chunk(chunk, eof)`` callback of one output stream of SdProc ``p``.

    Args:
        responder: a ``messages.Responder``.
        p: the SdProc (its exec request and pid are read, nothing is written).
        stream: ``stdout`` or ``stderr``.
        rank: this broker's rank, as a string.
        feed: ``feed(p, event)``, the service's way into the state machine.
        flow: the stream's ``outbox.Flow`` (foreground): its queued responses.
    """
    if not p.cmd.background:
        encoder = None
        msg = p.exec_request.msg
        imp_error = p.answers.imp_error if stream == "stderr" else None  # impfatal.py

        def stream_chunk(chunk, eof):
            nonlocal encoder
            if encoder is None:  # built at the first chunk: the pid is known by then
                encoder = responses.OutputEncoder(stream, rank, p.pid)
            if imp_error is not None and chunk:
                imp_error.see(chunk)
            responder.respond_raw(msg, encoder.data(chunk, eof) if chunk else encoder.eof(), flow)

        return stream_chunk

    def core_chunk(chunk, eof):
        if chunk:
            feed(p, OutputChunk(stream, rank, chunk, eof))

    return core_chunk
