"""settle.py: calls settled by what systemd knows of the unit; the systemd-timeout key."""

import errno
import random

import pytest

from flux_sdexec import config

from flux_sdexec.core import settle
from flux_sdexec.core.errors import RequestError
from flux_sdexec.core.settle import AWAIT_RECONNECT, DONE, KILL, LOOKUP, SEND, START, Call


def test_a_reply_settles_the_call():
    call = Call(START, 300, now=0)
    assert call.sending() == SEND
    assert call.replied(None) == DONE and call.error is None


def test_a_refusal_is_the_answer():
    call = Call(START, 300, now=0)
    call.sending()
    assert call.replied(errno.EINVAL, "Invalid Type setting: x") == DONE
    assert call.error == (errno.EINVAL, "Invalid Type setting: x")


def test_unit_exists_on_the_first_start_is_an_error():
    """Another unit of that name: not ours, so not taken as our start."""
    call = Call(START, 300, now=0)
    call.sending()
    assert call.replied(errno.EEXIST, "already loaded") == DONE
    assert call.error[0] == errno.EEXIST


def test_a_start_lost_with_the_connection_is_sent_again_when_systemd_lacks_the_unit():
    call = Call(START, 300, now=0)
    call.sending()
    assert call.replied(errno.ECONNRESET, "lost connection to systemd") == AWAIT_RECONNECT
    assert call.reconnected() == LOOKUP
    assert call.looked_up(errno.ENOENT) == SEND  # counted as sent
    assert call.replied(None) == DONE and call.error is None
    assert call.sends == 2


def test_a_start_lost_with_the_connection_is_taken_when_systemd_has_the_unit():
    call = Call(START, 300, now=0)
    call.sending()
    call.replied(errno.ECONNRESET)
    call.reconnected()
    assert call.looked_up(None) == DONE and call.error is None
    assert call.sends == 1


def test_unit_exists_after_a_repeat_is_our_first_start():
    call = Call(START, 300, now=0)
    call.sending()
    call.replied(errno.ECONNRESET)
    call.reconnected()
    call.looked_up(errno.ENOENT)
    assert call.replied(errno.EEXIST, "already loaded") == DONE and call.error is None


def test_a_passed_deadline_looks_the_unit_up_on_the_same_connection():
    call = Call(START, 300, now=0)
    call.sending()
    assert call.replied(errno.ETIMEDOUT) == LOOKUP
    assert call.looked_up(errno.ETIMEDOUT) == LOOKUP  # still stalled: ask again
    assert call.looked_up(None) == DONE and call.error is None


def test_the_budget_says_what_systemd_last_did():
    call = Call(START, 300, now=10)
    call.sending()
    call.replied(errno.ECONNRESET)
    call.reconnected()
    call.looked_up(errno.ENOENT)
    call.replied(errno.ETIMEDOUT)
    assert call.expired(now=310) == DONE
    assert call.error == (
        errno.ETIMEDOUT,
        "systemd-timeout (300s) ran out: no reply to StartTransientUnit, unit not loaded "
        "for 300s, sent 2 times, 1 reconnects",
    )


def test_a_kill_lost_with_the_connection_is_sent_again_while_the_unit_is_there():
    call = Call(KILL, 300, now=0)
    call.sending()
    assert call.replied(errno.ECONNRESET) == AWAIT_RECONNECT
    assert call.reconnected() == LOOKUP
    assert call.looked_up(None) == SEND
    assert call.replied(None) == DONE and call.error is None


def test_a_kill_past_its_deadline_is_taken_while_the_unit_is_there():
    call = Call(KILL, 300, now=0)
    call.sending()
    assert call.replied(errno.ETIMEDOUT) == LOOKUP
    assert call.looked_up(None) == DONE and call.error is None
    assert call.sends == 1


def test_a_kill_of_a_unit_gone_is_esrch():
    call = Call(KILL, 300, now=0)
    call.sending()
    call.replied(errno.ECONNRESET)
    call.reconnected()
    assert call.looked_up(errno.ENOENT) == DONE
    assert call.error[0] == errno.ESRCH


@pytest.mark.parametrize(
    "state, left, seen",
    [
        ("inactive.dead", False, "start job queued"),
        ("unknown.unknown", False, "StartTransientUnit answered, no unit state seen"),
        ("activating.start", True, "unit activating.start, process not started"),
    ],
)
def test_budget_text_of_a_start_taken(state, left, seen):
    assert settle.budget_text(60, 60.2, state, left) == (
        f"systemd-timeout (60s) ran out: {seen} for 60s"
    )


def test_pacing_is_prompt_then_bounded():
    assert settle.call_deadline(300) == 25 and settle.call_deadline(20) == 5
    assert settle.reconnect_delay(1) == pytest.approx(0.02)
    assert max(settle.reconnect_delay(n) for n in range(1, 100)) == 2.0
    assert settle.sweep_delay(0) == pytest.approx(0.2)
    assert max(settle.sweep_delay(n) for n in range(100)) == 5.0


# ---- a model of systemd behind an unreliable connection, driven at random ----


class Systemd:
    """One unit name; each message may be taken or not, its answer arrive or not."""

    def __init__(self, rng, alive=False):
        self.rng = rng
        self.loaded = alive
        self.alive = alive  # (kill) the unit runs
        self.starts = 0
        self.signals = 0

    def deliver(self, member):
        """Send one call; returns the errno the caller sees (None: success)."""
        fate = self.rng.choice(("answered", "lost-before", "lost-after", "stalled"))
        if fate != "lost-before":  # systemd read it (a stalled one is read later, in order)
            result = self._take(member)
        if fate == "answered":
            return result
        return errno.ETIMEDOUT if fate == "stalled" else errno.ECONNRESET

    def _take(self, member):
        if member == START:
            if self.loaded:
                return errno.EEXIST
            self.loaded, self.starts = True, self.starts + 1
            return None
        if member == KILL:
            if not self.alive:
                return errno.ENOENT
            self.signals += 1
            return None
        return None if self.loaded else errno.ENOENT  # GetUnit


def drive(rng, member, sd, expire_at=None):
    """Carry out the orders of one Call against ``sd``; return the call and its sends
    issued while systemd already had what they asked for."""
    call, wasted, order, steps = Call(member, 300, now=0), 0, None, 0
    order = call.sending()
    while order != DONE:
        steps += 1
        assert steps < 200, "the call never settled"
        if expire_at is not None and steps == expire_at:
            order = call.expired(now=300)
        elif order == SEND:
            wasted += member == START and sd.loaded
            order = call.replied(sd.deliver(member))
        elif order == LOOKUP:
            order = call.looked_up(sd.deliver("GetUnit"))
        elif order == AWAIT_RECONNECT:
            order = call.reconnected()
    return call, wasted


@pytest.mark.parametrize("seed", range(300))
def test_fuzz_a_start_is_taken_exactly_once(seed):
    rng = random.Random(seed)
    sd = Systemd(rng)
    expire_at = rng.choice((None, None, rng.randint(1, 6)))
    call, wasted = drive(rng, START, sd, expire_at)
    assert sd.starts <= 1
    if call.error is None:
        assert sd.starts == 1 and sd.loaded  # answered means systemd has the unit
    else:
        assert call.error[0] == errno.ETIMEDOUT and "ran out" in call.error[1]
    assert wasted == 0  # never sent again while systemd had the unit


@pytest.mark.parametrize("seed", range(200))
def test_fuzz_a_kill_reaches_a_running_unit(seed):
    rng = random.Random(seed)
    sd = Systemd(rng, alive=rng.random() < 0.8)
    call, _ = drive(rng, KILL, sd)
    if sd.alive:
        assert call.error is None and sd.signals >= 1
    else:
        assert call.error[0] in (errno.ENOENT, errno.ESRCH) and sd.signals == 0


# ---- [sdexec] systemd-timeout ----


@pytest.mark.parametrize(
    "value, seconds",
    [
        ("5m", 300),
        ("300s", 300),
        ("300", 300),
        (" 1.5h ", 5400),
        ("500ms", 0.5),
        (45, 45),
        (2.5, 2.5),
    ],
)
def test_systemd_timeout_accepts_durations(value, seconds):
    assert config.systemd_timeout({"sdexec": {"systemd-timeout": value}}) == seconds


def test_systemd_timeout_default():
    assert config.systemd_timeout({}) == settle.DEFAULT_BUDGET == 300


@pytest.mark.parametrize("value", ["soon", "0s", "-5m", "5 m", "", "inf", True, 0, [5], "5x"])
def test_systemd_timeout_refuses_the_rest(value):
    with pytest.raises(RequestError) as exc:
        config.systemd_timeout({"sdexec": {"systemd-timeout": value}})
    assert exc.value.errno == errno.EINVAL
    assert str(exc.value) == (
        'sdexec.systemd-timeout must be a duration above zero like "5m" or "300s": '
        f"got {value!r}"
    )
