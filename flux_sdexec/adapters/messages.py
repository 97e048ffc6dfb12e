"""Flux messages: who sent a request, its payload, and answering it.

The only place that reaches into a message with the C API (route, matchtag,
flags, ``flux_respond``): the Python Message object does not expose them.
"""

import errno
import json

from _flux._core import ffi, lib

from flux_sdexec.errors import RequestError


def sender_of(msg):
    """The uuid of the client that sent ``msg`` (RFC 6 route), or None."""
    route = lib.flux_msg_route_first(msg.handle)
    return ffi.string(route).decode() if route != ffi.NULL else None


def payload_of(msg, verb):
    """The decoded JSON payload, or RequestError(EPROTO)."""
    try:
        return msg.payload
    except (ValueError, TypeError):
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
    """Answers requests on one handle; a failure to send is logged."""

    def __init__(self, handle, log):
        self._h = handle
        self._log = log

    def respond(self, msg, payload=None):
        text = json.dumps(payload).encode() if payload is not None else ffi.NULL
        if lib.flux_respond(self._h.handle, msg.handle, text) < 0:
            self._log.error(f"error responding to {msg.topic}")

    def respond_raw(self, msg, text):
        """Send an already encoded JSON payload (the output hot path)."""
        lib.flux_respond(self._h.handle, msg.handle, text)

    def respond_error(self, msg, errnum, text=None):
        ctext = text.encode() if text else ffi.NULL
        if lib.flux_respond_error(self._h.handle, msg.handle, errnum, ctext) < 0:
            self._log.error(f"error responding to {msg.topic}")
