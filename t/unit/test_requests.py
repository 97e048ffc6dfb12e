"""``sdexec.usage`` and ``sdexec.usage-live`` answer a malformed request as every other
request of sdexec does: EPROTO, never "internal error" (review 3 #11). The real service
(rooted.py) with each request's decoded payload given directly (``payload_of`` reads a
flux message with the C API) and its answers recorded."""

import errno

import pytest
from rooted import RootBridge, service

from flux_sdexec.broker import requests


class Answers:
    """The service's Responder: what each request was answered, in order."""

    def __init__(self):
        self.sent = []

    def respond(self, msg, payload=None):
        self.sent.append(("respond", payload))

    def respond_error(self, msg, errnum, text=None):
        self.sent.append(("error", errnum, text))


@pytest.fixture
def ask(monkeypatch):
    """``ask(verb, payload)``: the answers of the usage request ``verb`` with ``payload``."""
    svc = service(RootBridge())
    answers = svc.responder = svc.requests._responder = Answers()
    monkeypatch.setattr(requests, "payload_of", lambda msg, verb: msg)
    handlers = {"usage": svc.requests.usage, "usage-live": svc.requests.usage_live}

    def ask(verb, payload):
        answers.sent.clear()
        svc.serve(payload, verb, handlers[verb], remote_ok=True)  # as modules/sdexec.py
        return answers.sent

    return ask


@pytest.mark.parametrize("payload", [[], "fA1", 3, None, ["jobid", "fA1"]])
@pytest.mark.parametrize("verb", ["usage", "usage-live"])
def test_a_payload_that_is_no_object_is_eproto(ask, verb, payload):
    """flux-core's unpack of a non-object fails with EPROTO; here ``.get`` raised
    AttributeError and the client read EINVAL "usage-live: internal error"."""
    assert ask(verb, payload) == [("error", errno.EPROTO, f"malformed {verb} request")]


def test_a_live_job_id_beyond_64_bits_is_eproto(ask):
    """An f58 id over 2^64 was taken and its last 64 bits named another job's KVS key."""
    plain = "f" + "z" * 12
    text = f"usage-live: jobid {plain!r} is not an f58plain id"
    assert ask("usage-live", {"jobid": plain}) == [("error", errno.EPROTO, text)]
