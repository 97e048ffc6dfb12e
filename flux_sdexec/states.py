"""Process states, stop-timer stages and the transition table.

Everything that decides which (state, input) pairs are legal lives here, as
data. Pure: stdlib only.
"""

import enum

from flux_sdexec.events import (
    ClientGone,
    OutputClosed,
    PostStartCheckFailed,
    StopTimerExpired,
    UnitChanged,
    Unloading,
    WaitRequested,
    WaiterGone,
)


class ProcState(enum.Enum):
    """Where one sdexec process is in its life."""

    STARTING = "starting"  # unit accepted by systemd, process not seen running
    RUNNING = "running"  # "started" answered
    FINISHED = "finished"  # exit status known and reported, waiting for stop and EOFs
    FAILED = "failed"  # an error is stored, waiting for the unit to go away
    ZOMBIE = "zombie"  # background waitable, over, its unit kept as the record for sdexec.wait
    RELEASING = "releasing"  # all answered; waiting for systemd to forget the unit
    DONE = "done"  # nothing more is owed; the adapter forgets it

    def __repr__(self):
        return self.name


class StopStage(enum.IntEnum):
    """Stop-timer escalation: what the next expiry does."""

    IDLE = 0
    SIGTERM = 1  # next expiry sends SIGTERM
    SIGNAL = 2  # next expiry sends the configured signal (SIGKILL by default)
    ABANDON = 3  # next expiry gives up with EDEADLK


S = ProcState
_LIVE = {S.STARTING, S.RUNNING, S.FINISHED, S.FAILED, S.ZOMBIE, S.RELEASING, S.DONE}

# (state, input type) -> the states that input may lead to. A pair not listed raises.
TRANSITIONS = {
    (S.STARTING, UnitChanged): _LIVE,
    (S.STARTING, OutputClosed): {S.STARTING, S.FAILED, S.ZOMBIE, S.RELEASING, S.DONE},
    (S.STARTING, StopTimerExpired): {S.STARTING, S.RELEASING},
    (S.STARTING, PostStartCheckFailed): {S.FAILED},
    (S.STARTING, ClientGone): {S.STARTING},
    (S.STARTING, WaitRequested): {S.STARTING},
    (S.STARTING, WaiterGone): {S.STARTING},
    (S.STARTING, Unloading): {S.DONE},
    (S.RUNNING, UnitChanged): {S.RUNNING, S.FINISHED, S.FAILED, S.ZOMBIE, S.RELEASING, S.DONE},
    (S.RUNNING, OutputClosed): {S.RUNNING},
    (S.RUNNING, StopTimerExpired): {S.RUNNING, S.ZOMBIE, S.RELEASING},
    (S.RUNNING, ClientGone): {S.RUNNING},
    (S.RUNNING, WaitRequested): {S.RUNNING},
    (S.RUNNING, WaiterGone): {S.RUNNING},
    (S.RUNNING, Unloading): {S.DONE},
    (S.FINISHED, UnitChanged): {S.FINISHED, S.ZOMBIE, S.RELEASING, S.DONE},
    (S.FINISHED, OutputClosed): {S.FINISHED, S.ZOMBIE, S.RELEASING, S.DONE},
    (S.FINISHED, StopTimerExpired): {S.FINISHED, S.ZOMBIE, S.RELEASING},
    (S.FINISHED, ClientGone): {S.FINISHED},
    (S.FINISHED, WaitRequested): {S.FINISHED},
    (S.FINISHED, WaiterGone): {S.FINISHED},
    (S.FINISHED, Unloading): {S.DONE},
    (S.FAILED, UnitChanged): {S.FAILED, S.ZOMBIE, S.RELEASING, S.DONE},
    (S.FAILED, OutputClosed): {S.FAILED, S.ZOMBIE, S.RELEASING, S.DONE},
    (S.FAILED, StopTimerExpired): {S.FAILED, S.ZOMBIE, S.RELEASING},
    (S.FAILED, ClientGone): {S.FAILED},
    (S.FAILED, WaitRequested): {S.FAILED},
    (S.FAILED, WaiterGone): {S.FAILED},
    (S.FAILED, Unloading): {S.DONE},
    (S.ZOMBIE, UnitChanged): {S.ZOMBIE},
    (S.ZOMBIE, OutputClosed): {S.ZOMBIE},
    (S.ZOMBIE, StopTimerExpired): {S.ZOMBIE},
    (S.ZOMBIE, WaitRequested): {S.RELEASING, S.DONE},
    (S.ZOMBIE, ClientGone): {S.ZOMBIE},
    (S.ZOMBIE, Unloading): {S.DONE},
    (S.RELEASING, UnitChanged): {S.RELEASING, S.DONE},
    (S.RELEASING, OutputClosed): {S.RELEASING},
    (S.RELEASING, StopTimerExpired): {S.RELEASING},
    (S.RELEASING, ClientGone): {S.RELEASING},
    (S.RELEASING, Unloading): {S.DONE},
}

TERMINAL = frozenset({S.DONE})
