"""Flux messages: who sent a request, its payload, and answering it with JSON.

With outbox.py (which derives and sends the responses), the only place that reaches
into a message with the C API (route, matchtag, flags): the Python Message object
does not expose them.
"""

import errno
import json

from _flux._core import ffi, lib

from flux_sdexec.core.errors import RequestError


def sender_of(msg):
    """The uuid of the client that sent ``msg`` (RFC 6 route), or None."""
    route = lib.flux_msg_route_first(msg.handle)
    return ffi.string(route).decode() if route != ffi.NULL else None


def payload_of(msg, verb):
    """The decoded JSON payload, or RequestError(EPROTO) (read with the C API: the
    bindings' Message.payload costs three wrapped calls per request)."""
    strp = ffi.new("const char **")
    if lib.flux_msg_get_string(msg.handle, strp) < 0 or strp[0] == ffi.NULL:
        raise RequestError(errno.EPROTO, f"malformed {verb} request")
    try:
        return json.loads(ffi.string(strp[0]))
    except ValueError:
        raise RequestError(errno.EPROTO, f"malformed {verb} request") from None


def is_streaming(msg):
    return bool(lib.flux_msg_is_streaming(msg.handle))


def is_noresponse(msg):
    return bool(lib.flux_msg_is_noresponse(msg.handle))


def is_local(msg):
    return bool(msg.rolemask & lib.FLUX_ROLE_LOCAL)


class Request:
    """A request the core refers to (an exec request or a parked wait): the message and
    its client, known once."""

    __slots__ = ("msg", "sender", "matchtag")

    def __init__(self, msg):
        self.msg = msg
        self.sender = sender_of(msg)
        tag = ffi.new("uint32_t [1]")
        lib.flux_msg_get_matchtag(msg.handle, tag)
        self.matchtag = tag[0]


class Responder:
    """Answers requests with JSON payloads or errors through an ``outbox.Outbox`` (never
    blocking)."""

    def __init__(self, outbox):
        self.outbox = outbox

    def respond(self, msg, payload=None):
        self.outbox.respond(msg, 0, json.dumps(payload).encode() if payload is not None else None)

    def respond_error(self, msg, errnum, text=None):
        self.outbox.respond(msg, errnum, text.encode() if text else None)
