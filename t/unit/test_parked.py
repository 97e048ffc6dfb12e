"""Requests parked until their turn (parked.py): each ends once, taken or answered."""

import errno

from flux_sdexec.broker.parked import DISCONNECT_TEXT, ParkedRequests


def parked():
    answers = []
    lot = ParkedRequests(lambda *answer: answers.append(answer), lambda msg: msg[1])
    return lot, answers


def test_a_request_taken_is_no_longer_parked():
    lot, answers = parked()
    lot.park("a", ("msg", "alice"), data="proceed")
    assert "a" in lot and len(lot) == 1 and lot.data() == ["proceed"]
    assert lot.take("a") == (("msg", "alice"), "proceed")
    assert lot.take("a") is None and len(lot) == 0 and answers == []


def test_a_disconnect_answers_only_its_clients_requests():
    lot, answers = parked()
    alice, bob = ("msg", "alice"), ("msg", "bob")
    lot.park("a", alice)
    lot.park("b", bob)
    lot.cancel("alice")
    assert answers == [(alice, errno.ECONNRESET, DISCONNECT_TEXT)]
    assert "a" not in lot and lot.take("b") == (bob, None)


def test_the_unload_answers_every_request_once():
    lot, answers = parked()
    first, second = ("msg", "alice"), ("msg", "bob")
    lot.park("a", first)
    lot.park("b", second)
    lot.cancel_all(errno.ENOSYS, "unloading")
    lot.cancel_all(errno.ENOSYS, "unloading")
    assert answers == [(first, errno.ENOSYS, "unloading"), (second, errno.ENOSYS, "unloading")]
    assert len(lot) == 0


def test_without_senders_no_disconnect_cancels():
    answers = []
    lot = ParkedRequests(lambda *answer: answers.append(answer))
    lot.park(0, "msg")
    lot.cancel("alice")
    assert answers == [] and lot.take(0) == ("msg", None)
