"""The sdexec wire protocol, responses: what sdexec sends back, as payloads or JSON text.

With protocol.py, the only module that knows the JSON keys of RFC 42 and
flux-core's sdexec (sdexec-protocol.md §2-4). Pure: stdlib only.
"""

import base64
from json.encoder import encode_basestring


def started(pid):
    """The ``started`` response."""
    return {"type": "started", "pid": pid}


def finished(status):
    """The ``finished`` response."""
    return {"type": "finished", "status": status}


def wait_result(status, output):
    """The ``sdexec.wait`` response; ``output`` is left out when nothing was retained."""
    if output:
        return {"status": status, "output": output}
    return {"status": status}


def list_entry(pid, cmd, label, finished_):
    """One ``sdexec.list`` entry: exactly the four keys flux.subprocess.list accepts."""
    return {"pid": pid, "cmd": cmd, "label": label or "", "state": "Z" if finished_ else "R"}


def io_object(stream, rank, data, eof=False):
    """An RFC 42 io object as a dict (used for retained output)."""
    io = {"stream": stream, "rank": rank}
    if data:
        try:
            io["data"] = data.decode()
        except UnicodeDecodeError:
            io["data"] = base64.b64encode(data).decode()
            io["encoding"] = "base64"
    if eof:
        io["eof"] = True
    return io


class OutputEncoder:
    """Builds ``output`` response payloads as JSON text for one stream (the hot path).

    Precomputes everything but the data so a line costs one string escape.
    """

    __slots__ = ("_head", "_eof_only")

    def __init__(self, stream, rank, pid):
        self._head = f'{{"type":"output","pid":{pid},"io":{{"stream":"{stream}","rank":"{rank}"'
        self._eof_only = self._head + ',"eof":true}}'

    def data(self, chunk, eof=False):
        """JSON text of an output message carrying ``chunk`` (bytes)."""
        tail = ',"eof":true}}' if eof else "}}"
        try:
            text = chunk.decode()
        except UnicodeDecodeError:
            b64 = base64.b64encode(chunk).decode()
            return f'{self._head},"data":"{b64}","encoding":"base64"{tail}'
        return f'{self._head},"data":{encode_basestring(text)}{tail}'

    def eof(self):
        """JSON text of an EOF-only output message."""
        return self._eof_only
