"""Settling a systemd call by what systemd knows of its unit, not by one reply.

A reply may be lost with the connection (daemon-reexec closes systemd's private
socket), or not come within the call's deadline (a stalled systemd). Neither says
whether systemd acted, so the call is then resolved by looking its unit up:

- StartTransientUnit: the unit is there, the start was taken (carry on as if
  answered); it is not, the start never arrived (send it again: the unit name is
  unique, so a repeat cannot start a second process). UnitExists after a repeat
  is our own first start: taken.
- KillUnit: the unit is gone: nothing to signal (ESRCH). It is there: after a lost
  connection the signal may never have arrived, so it is sent again (a termination
  signal delivered twice does no harm; one lost leaves a job running); after a deadline
  on a live connection systemd has it queued, in order: taken.

Each call has a budget (``[sdexec] systemd-timeout``): once it runs out the call
fails with a text saying what systemd last did. ``Call`` holds one call's story and
answers each event with an order for the adapter (systemd/calls.py).
Pure: stdlib only.
"""

import errno

START, KILL = "StartTransientUnit", "KillUnit"
DEFAULT_BUDGET = 300.0  # seconds; doc/guide/differences.md says why
MAX_CALL_DEADLINE = 25.0  # sd-bus's default for a blocking call
UNKNOWN = frozenset((errno.ECONNRESET, errno.ENOTCONN, errno.ETIMEDOUT))

# orders for the adapter
SEND = "send"  # (re)send the call
LOOKUP = "lookup"  # ask systemd whether the unit is loaded (GetUnit)
AWAIT_RECONNECT = "await-reconnect"  # look the unit up once the connection is back
DONE = "done"  # settled: answer the caller with Call.error (None: success)


def call_deadline(budget):
    """How long one attempt may wait for its reply before the unit is looked up."""
    return min(MAX_CALL_DEADLINE, budget / 4)


class Call:
    """One call's story: attempts, lookups, and what systemd last did.

    Args:
        member: START or KILL.
        budget: seconds from the first send until the call fails.
        now: the time of the first send (any monotonic clock).
    """

    def __init__(self, member, budget, now):
        self.member = member
        self.budget = budget
        self.began = now
        self.sends = 0
        self.reconnects = 0
        self.lost = False  # an attempt's fate was lost with a connection
        self.resent = False
        self.error = None  # (errno, text) once settled with an error
        self.settled = False
        self.last = f"no reply to {member}"  # what systemd last did, for the budget's text

    @property
    def deadline(self):
        """When the budget runs out."""
        return self.began + self.budget

    def sending(self):
        """The adapter sends an attempt now."""
        self.resent = self.sends > 0
        self.sends += 1
        return SEND

    def replied(self, errnum, text=None):
        """The reply (errnum None: success) or the failure of an attempt or a lookup's send."""
        if errnum is None:
            return self._done()
        if errnum in UNKNOWN:
            return self._unknown(errnum)
        if errnum == errno.EEXIST and self.member == START and self.resent:
            return self._done()  # our own first start was taken after all
        return self._done((errnum, text or ""))

    def looked_up(self, errnum):
        """GetUnit's answer: None (loaded), ENOENT (not loaded), or a failure."""
        if errnum is None:
            self.last = "the unit was loaded, no reply"
            if self.member == KILL and self.lost:
                self.lost = False
                return self.sending()
            return self._done()
        if errnum == errno.ENOENT:
            if self.member == KILL:
                return self._done((errno.ESRCH, "unit is gone"))
            self.last = f"no reply to {self.member}, unit not loaded"
            return self.sending()
        if errnum in UNKNOWN:
            return self._unknown(errnum)
        return self._done((errnum, f"looking the unit up: {errno.errorcode.get(errnum, errnum)}"))

    def reconnected(self):
        """The connection is back: look the unit up."""
        self.reconnects += 1
        return LOOKUP

    def expired(self, now):
        """The budget ran out before the call settled."""
        extra = f", sent {self.sends} times" if self.sends > 1 else ""
        if self.reconnects:
            extra += f", {self.reconnects} reconnects"
        took = now - self.began
        text = f"systemd-timeout ({self.budget:g}s) ran out: {self.last} for {took:.0f}s{extra}"
        return self._done((errno.ETIMEDOUT, text))

    def _unknown(self, errnum):
        if errnum == errno.ETIMEDOUT:
            return LOOKUP  # same connection: the lookup is answered after the call
        self.lost = True
        self.last = f"no reply to {self.member} (connection lost)"
        return AWAIT_RECONNECT

    def _done(self, error=None):
        self.settled = True
        self.error = error
        return DONE


def budget_text(budget, waited, state, left_inactive):
    """Why a start that systemd took is failed when the budget runs out before its process
    runs: what the unit was last seen doing (``state`` is ``<ActiveState>.<SubState>``; a
    unit still inactive that never left it has its start job queued)."""
    if state.startswith("inactive.") and not left_inactive:
        seen = "start job queued"
    elif state.startswith("unknown."):
        seen = "StartTransientUnit answered, no unit state seen"
    else:
        seen = f"unit {state}, process not started"
    return f"systemd-timeout ({budget:g}s) ran out: {seen} for {waited:.0f}s"


def sweep_delay(attempt):
    """Pause before sweep round ``attempt`` (0, 1, ...) of a unit left behind: prompt at
    first, then no more than every 5 s while systemd refuses or stalls."""
    return min(0.2 * 2**attempt, 5.0)


def reconnect_delay(attempt):
    """Pause before reconnect attempt ``attempt`` (1, 2, ...): a daemon-reexec takes
    ~100 ms, so the first retries come quickly; then no more than every 2 s."""
    return min(0.02 * 2 ** (attempt - 1), 2.0)
