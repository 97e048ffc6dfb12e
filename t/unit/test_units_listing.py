"""``sdexec.units`` with ``all: true`` (review 2026-12b, finding 8): the listing of this
rank's units is ListUnitsByPatterns sent without waiting on the module's bus, and the
request is answered from its reply, once: with the units, or an errno and a text when the
call fails, passes its deadline, or the module unloads first. A stalled systemd then costs
the asking client its answer only, never the reactor (output, answers, stop timers).
No flux, no systemd: the bridge's calls are answered by hand (stubs.py)."""

import errno
from flux_sdexec.broker import introspect
from flux_sdexec.core.errors import UnitError
from flux_sdexec.core.naming import UnitNamer
from flux_sdexec.core.protocol import ExecRequest
from flux_sdexec.core.registry import Registry
from flux_sdexec.core.sdproc import SdProc

from stubs import StubBridge, StubBus

INSTANCE = "tX"
LISTED = [
    ("a:tX.service", "active", "running"),  # tracked
    ("left:tX.service", "failed", "failed"),  # a leftover
]


class Responder:
    def __init__(self):
        self.sent = []  # (msg, payload) or (msg, errno, text)

    def respond(self, msg, payload):
        self.sent.append((msg, payload))

    def respond_error(self, msg, errnum, text):
        self.sent.append((msg, errnum, text))


class Calls:
    def deadline(self):
        return 7.5


class Parts:
    """What the listings use: a registry with one tracked process, stub systemd calls."""

    def __init__(self):
        self.registry = Registry()
        cmd = ExecRequest(cmdline=["true"], env={}, label="a")
        self.registry.add(SdProc(None, cmd, "a:tX.service"))
        self.bridge, self.bus, self.responder = StubBridge(), StubBus(), Responder()

    def listings(self):
        namer = UnitNamer(INSTANCE, 0, False)
        return introspect.UnitListings(
            0, self.registry, namer, lambda unit: None, self.bridge, self.bus, Calls(),
            self.responder,
        )  # fmt: skip


def test_all_is_answered_from_the_listings_reply_not_inline():
    svc = Parts()
    listings = svc.listings()
    listings.answer("msg", True)
    assert svc.responder.sent == []  # not answered inline: nothing waited for systemd
    [call] = svc.bridge.pending
    assert call.member == "ListUnitsByPatterns" and call.unit == ("*:tX.service",)
    assert svc.bus.sends == 1  # the bus watcher arms the call's deadline
    svc.bridge.answer_with("ListUnitsByPatterns", LISTED)
    [(msg, payload)] = svc.responder.sent
    assert msg == "msg" and [p["unit"] for p in payload["procs"]] == ["a:tX.service"]
    assert payload["untracked"] == [
        {"unit": "left:tX.service", "label": "left", "unit_state": "failed.failed"}
    ]


def test_without_all_the_answer_goes_at_once_and_systemd_is_not_asked():
    svc = Parts()
    svc.listings().answer("msg", False)
    assert svc.bridge.sent == [] and len(svc.responder.sent) == 1
    assert "untracked" not in svc.responder.sent[0][1]


def test_a_failed_listing_is_one_error_with_its_errno_and_a_clear_text():
    svc = Parts()
    listings = svc.listings()
    listings.answer("late", True)
    listings.answer("lost", True)
    svc.bridge.answer("ListUnitsByPatterns", UnitError(errno.ETIMEDOUT, "systemd did not answer"))
    svc.bridge.lose()
    assert svc.responder.sent == [
        ("late", errno.ETIMEDOUT, "listing this rank's units: systemd did not answer within 7.5s"),
        ("lost", errno.ECONNRESET, "listing this rank's units: lost connection to systemd"),
    ]


def test_a_listing_that_cannot_be_sent_is_answered_once_by_the_caller():
    """The bus is down: the send raises, the RPC's guard (service.serve) answers with that
    errno; the listing answers nothing more, ever."""
    svc = Parts()
    listings = svc.listings()
    svc.bridge.refuse_next(UnitError(errno.ECONNRESET, "lost connection to systemd"))
    try:
        listings.answer("msg", True)
    except UnitError as exc:
        assert exc.errno == errno.ECONNRESET
    else:
        raise AssertionError("the send's failure was swallowed")
    listings.cancel_all(errno.ENOSYS, "unloading")
    assert svc.responder.sent == []


def test_unload_answers_the_listings_still_out_then_late_replies_are_dropped():
    svc = Parts()
    listings = svc.listings()
    listings.answer("msg", True)
    listings.cancel_all(errno.ENOSYS, "sdexec is unloading")
    assert svc.responder.sent == [("msg", errno.ENOSYS, "sdexec is unloading")]
    svc.bridge.answer_with("ListUnitsByPatterns", LISTED)
    assert len(svc.responder.sent) == 1
