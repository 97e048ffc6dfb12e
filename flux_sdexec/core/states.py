"""Process states, unit phases, stop-timer stages and the two sub-states of an SdProc
(its exec's answers, its record's claim window): the vocabulary of table.py.

Pure: stdlib only.
"""

import enum


class ProcState(enum.Enum):
    """Where one sdexec process is in its life."""

    STARTING = "starting"  # unit accepted by systemd, process not seen running
    RUNNING = "running"  # "started" answered (or, background, the start logged)
    FINISHED = "finished"  # exit status known and reported, waiting for the unit to go and EOFs
    FAILED = "failed"  # an error is stored, waiting for the unit to go away
    ZOMBIE = "zombie"  # background waitable, over, its unit kept as the record for sdexec.wait
    ANSWERED = "answered"  # its wait was answered; the record is kept a grace (waits.py)
    RELEASING = "releasing"  # all answered; waiting for systemd to forget the unit
    DONE = "done"  # nothing more is owed; the adapter forgets it

    __hash__ = object.__hash__  # members are singletons; Enum's hash is Python code (hot path)

    def __repr__(self):
        return self.name


class Phase(enum.Enum):
    """A unit fact that asks for a decision, once it is known (state-triggered rows).

    machine.py looks for them in this order after every input, each at most once.
    """

    POST_START_CHECK = "the main pid is known and a containment check is asked for"
    STARTED = "the process runs (or its exit is already known)"
    EXITED = "ExecMainCode/ExecMainStatus arrived with a real exit"
    EXEC_FAILED = "ExecMainStatus is one of systemd's 200-243 exec failures"
    OVER = "active/exited or failed: the unit holds nothing but our record"
    DEACTIVATING = "systemd is stopping the unit"
    GONE = "inactive again after having run"
    RELEASE_CHECK = "anything systemd says about a unit being let go"

    __hash__ = object.__hash__

    def __repr__(self):
        return self.name


class StopStage(enum.IntEnum):
    """Stop-timer escalation: what the next expiry does (IDLE: the timer is not armed)."""

    IDLE = 0
    SIGTERM = 1  # next expiry sends SIGTERM
    SIGNAL = 2  # next expiry sends the configured signal (SIGKILL by default)
    ABANDON = 3  # next expiry gives up with EDEADLK


class ExecAnswer(enum.Enum):
    """How far the exec request has been answered: "started", then "finished".

    One state, never a pair of flags: "finished" follows "started" (the EXITED phase has
    its row in RUNNING only). A background exec logs what a foreground one answers.
    """

    NONE = "nothing yet"
    STARTED = "started answered (background: the start logged; adopted: long ago)"
    FINISHED = "finished answered (background: the exit logged)"
    FINISH_HELD = "finished goes out once the unit is gone (the IMP's stderr, or an error)"

    __hash__ = object.__hash__

    def __repr__(self):
        return self.name


class Claim(enum.Enum):
    """Why a zombie record is kept only a while for a wait (waits.py: the claim window)."""

    NONE = "no claim window (a zombie of this sdexec's own exec is kept until its wait comes)"
    OPEN = "no client is known to wait for it (adopted at load)"
    REVIVED = "in a claim window, collectable again: its answer may have been lost"

    __hash__ = object.__hash__

    def __repr__(self):
        return self.name


S = ProcState
# states in which the exec request's unit runs its course; the only ones where the stop
# timer may be armed: leaving them cancels it (machine.py, one place)
ESCALATING = frozenset({S.STARTING, S.RUNNING, S.FINISHED, S.FAILED})
LIVE = frozenset(set(S) - {S.DONE})
TERMINAL = frozenset({S.DONE})
