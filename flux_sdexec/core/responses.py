"""The sdexec wire protocol, responses: what sdexec sends back, as payloads or JSON text.

With protocol.py, the only module that knows the JSON keys of RFC 42 and
flux-core's sdexec (sdexec-protocol.md §2-4). Pure: stdlib only.
"""

import base64
import re
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
    """Builds ``output`` response payloads as encoded JSON for one stream (the hot path).

    Precomputes everything but the data. A chunk of printable ASCII (with at most a final
    newline) is spliced in as bytes, never decoded; anything else goes through the JSON
    string escape. Both give the same bytes for the same chunk.
    """

    __slots__ = ("_head", "_eof_only")

    def __init__(self, stream, rank, pid):
        head = f'{{"type":"output","pid":{pid},"io":{{"stream":"{stream}","rank":"{rank}"'
        self._head = head.encode()
        self._eof_only = self._head + b',"eof":true}}'

    def data(self, chunk, eof=False):
        """Encoded JSON of an output message carrying ``chunk`` (bytes)."""
        tail = b',"eof":true}}' if eof else b"}}"
        if chunk[-1:] == b"\n":
            body, newline = chunk[:-1], b"\\n"
        else:
            body, newline = chunk, b""
        if body.isascii() and _PLAIN.fullmatch(body):
            return b"".join((self._head, b',"data":"', body, newline, b'"', tail))
        try:
            text = chunk.decode()
        except UnicodeDecodeError:
            b64 = base64.b64encode(chunk)
            return b"".join((self._head, b',"data":"', b64, b'","encoding":"base64"', tail))
        return b"".join((self._head, b',"data":', encode_basestring(text).encode(), tail))

    def eof(self):
        """Encoded JSON of an EOF-only output message."""
        return self._eof_only


# what needs no JSON escape: ASCII from space to ~ except the quote and the backslash
_PLAIN = re.compile(rb"[ !#-\[\]-~]*")


def usage_rows(rows, missing):
    """``sdexec.usage-live``'s answer: ``{"rows": {rank: row}, "missing": {rank: why}}``."""
    return {
        "rows": {str(r): row for r, row in rows.items()},
        "missing": {str(r): why for r, why in missing.items()},
    }
