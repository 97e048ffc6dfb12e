"""Random walks over the state machine, checking what must hold whatever happens.

Each walk is one SdProc of a random kind (foreground, background, waitable,
adopted; stop timer or not; AllowedCPUs check or not) fed, in a random order,
what systemd (sim.SimUnit), the channels, the stop timer and clients may send,
with the actions carried out as the adapters do. Then the walk is settled: all
that is still due is delivered, a zombie is waited for, and a process still
alive at the end is unloaded. Reproduce one walk with FUZZ_SEED=<seed> and
FUZZ_WALKS=1.

A few walks have their start refused (StartFailed). Invariants: no exception;
exactly one terminal response per request (none for a waiter that went away);
nothing after DONE; the stop timer armed only while escalating; settling alone
brings every process to DONE, with its unit stopped, reset or handed to a waiter;
no realistic input is refused by the table.
"""

import errno
import os
import random
import signal

from flux_sdexec.core import handoff
from flux_sdexec.core.events import (
    AnswerMaybeLost,
    ContainmentChecked,
    AnswerWait,
    ArmGrace,
    ArmTimer,
    CancelTimer,
    CheckContainment,
    ClientGone,
    CloseChannels,
    DrainOutput,
    GraceExpired,
    KillUnit,
    OutputChunk,
    OutputClosed,
    OutputDrained,
    Reap,
    ResetFailedUnit,
    Respond,
    RespondError,
    StartFailed,
    StartOutput,
    StopTimerExpired,
    StopUnit,
    UnitChanged,
    Unloading,
    WaitRequested,
    WaiterGone,
)
from flux_sdexec.core.machine import handle
from flux_sdexec.core.states import ESCALATING, ProcState, StopStage

from helpers import CHECK, new
from sim import FATES, SimUnit

SEED = int(os.environ.get("FUZZ_SEED", "9"))
WALKS = int(os.environ.get("FUZZ_WALKS", "3000"))


class Walk:
    """One SdProc, its simulated unit, and what the adapters would have seen."""

    def __init__(self, seed):
        self.rng = rng = random.Random(seed)
        self.background = rng.random() < 0.5
        self.adopted = self.background and rng.random() < 0.1
        self.waitable = self.background and (self.adopted or rng.random() < 0.6)
        streams = (
            ("stdout", "stderr")
            if self.background
            else rng.choice([(), ("stdout",), ("stdout", "stderr")])
        )
        self.p = new(
            ["sh"],
            streams=() if self.adopted else streams,
            background=self.background,
            waitable=self.waitable,
            stop_timer_sec=rng.choice([None, 1]),
            stop_signal=rng.choice([signal.SIGKILL, signal.SIGUSR1]),
            post_start_check=None if self.adopted else rng.choice([None, CHECK]),
            adopted=self.adopted,
        )
        self.sim = SimUnit(rng, rng.choice(FATES))
        self.refused = not self.adopted and rng.random() < 0.05  # the start's reply is an error
        self.reading = False
        self.timer = False
        self.grace = False  # the grace timer (ArmGrace) is armed
        self.closed = False  # CloseChannels or Reap: no more output events
        self.eof = {s: False for s in streams if not self.adopted}
        self.answers = {"exec": []}  # request -> responses
        self.waiters = []
        self.gone_waiters = set()
        self.unloaded = False
        self.depth = 0
        self.trace = [f"fate {self.sim.fate}, {self.p.cmd}"]

    def feed(self, event):
        p = self.p
        was_done = p.state is ProcState.DONE
        actions = handle(p, event)
        self.trace.append(f"{event} -> {p.state!r} {actions}")
        assert not (was_done and actions), f"actions after DONE: {actions}"
        self.depth += 1
        for action in actions:
            self.carry_out(action)
        self.depth -= 1
        if self.depth:
            return  # an answer fed while carrying out an outer list: check after all of it
        assert p.state is not ProcState.DONE or p.wait.waiter is None, "DONE with a parked waiter"
        armed = p.stop.stage is not StopStage.IDLE
        assert self.timer == armed, f"timer {self.timer} but stage {p.stop.stage!r}"
        assert not self.timer or p.state in ESCALATING, f"timer armed in {p.state!r}"

    def carry_out(self, a):
        kind = type(a)
        if kind in (Respond, RespondError):
            self.answers["exec"].append(a)
        elif kind is AnswerWait:
            self.answers.setdefault(id(a.waiter), []).append(a)
        elif kind is CheckContainment:
            self.feed(ContainmentChecked(self.rng.choice([None, "AllowedCPUs not enforced"])))
        elif kind is DrainOutput:
            self.feed(OutputDrained())
        elif kind is StartOutput:
            self.reading = True
        elif kind in (CloseChannels, Reap):
            self.closed = True
        elif kind is ArmTimer:
            self.timer = True
        elif kind is CancelTimer:
            self.timer = False
        elif kind is ArmGrace:
            self.grace = True
        elif kind is StopUnit:
            self.sim.stop_unit()
        elif kind is KillUnit:
            self.sim.kill_unit(a.signum)
        elif kind is ResetFailedUnit:
            self.sim.reset_failed()
        if kind is Reap:
            self.timer = self.grace = False

    def choices(self, settling=False):
        """What may happen next, as (name, callable)."""
        p, sim, out = self.p, self.sim, []
        if sim.queue:
            out.append(lambda: self.feed(UnitChanged(sim.queue.pop(0))))
        if not settling:
            out += sim.spontaneous()
        open_streams = [s for s, done in self.eof.items() if not done]
        if self.reading and not self.closed and open_streams:
            stream = self.rng.choice(open_streams)
            if sim.state[0] in ("inactive", "failed") or (
                not settling and self.rng.random() < 0.05
            ):
                out.append(lambda: self.close(stream))
            if self.background and not settling:
                out.append(lambda: self.feed(OutputChunk(stream, "0", b"line\n")))
        if self.timer:
            out.append(self.expire)
        if self.grace and (settling or self.rng.random() < 0.3):
            out.append(self.grace_ends)
        if settling:  # last: what the process does when nothing else is due
            out += sim.spontaneous()
        if not settling:
            visible = p.visible and p.state is not ProcState.DONE
            if self.waitable and visible and p.wait.waiter is None:
                out.append(self.wait)
            if p.wait.waiter is not None:
                out.append(self.waiter_gone)
            if p.wait.answered_to is not None:
                out.append(self.answer_maybe_lost)
            out.append(lambda: self.feed(ClientGone()))
        return out

    def expire(self):
        self.timer = False  # a one-shot timer: ArmTimer again to re-arm
        self.feed(StopTimerExpired())

    def grace_ends(self):
        self.grace = False
        self.feed(GraceExpired())

    def answer_maybe_lost(self):
        """The answered waiter disconnects within the grace; a newer process may have
        taken the label meanwhile."""
        self.feed(AnswerMaybeLost(label_taken=self.rng.random() < 0.2))

    def close(self, stream):
        self.eof[stream] = True
        self.feed(OutputClosed(stream))

    def wait(self):
        waiter = object()
        self.waiters.append(waiter)
        self.feed(WaitRequested(waiter))

    def waiter_gone(self):
        self.gone_waiters.add(id(self.p.wait.waiter))
        self.feed(WaiterGone())

    def refuse(self):
        """systemd answers the start with an error: the unit never runs. Signals of the
        name sent before the reply (another connection, no order) may come first."""
        sim, rng = self.sim, self.rng
        sim.queue, sim.state, sim.alive = sim.queue[: rng.randrange(3)], ("inactive", "dead"), False
        while sim.queue and rng.random() < 0.5:
            self.feed(UnitChanged(sim.queue.pop(0)))
        if self.waitable and rng.random() < 0.5:
            self.wait()
        self.feed(StartFailed(errno.EEXIST, "Unit u.service was already loaded."))
        sim.queue.clear()

    def run(self, steps):
        if self.refused:
            self.refuse()
        for _ in range(steps):
            if self.p.state is ProcState.DONE:
                break
            moves = self.choices()
            if not moves:
                break
            self.rng.choice(moves)()
        if self.rng.random() < 0.05 and self.p.state is not ProcState.DONE:
            self.unload()
        for _ in range(200):  # settle: deliver what is due, then let stuck processes die
            moves = self.choices(settling=True)
            if self.p.state is ProcState.DONE or not moves:
                break
            moves[0]()
        if self.p.state is ProcState.ZOMBIE:
            self.wait()
            for _ in range(200):
                moves = self.choices(settling=True)
                if self.p.state is ProcState.DONE or not moves:
                    break
                moves[0]()
        assert self.p.state is ProcState.DONE, f"settled in {self.p.state!r}"
        self.feed(self.rng.choice([ClientGone(), StopTimerExpired(), Unloading()]))

    def unload(self):
        """A clean unload; one that may hand the unit over does so half the time."""
        self.unloaded = True
        self.feed(Unloading(hand_over=handoff.can_hand_over(self.p) and self.rng.random() < 0.5))

    def check(self):
        p = self.p
        assert p.state is ProcState.DONE
        exec_answers = self.answers["exec"]
        if self.adopted:
            assert exec_answers == []
        else:
            terminal = [a for a in exec_answers if isinstance(a, RespondError)]
            if self.background:
                started = [a for a in exec_answers if isinstance(a, Respond)]
                assert len(started) + len(terminal) == 1, exec_answers
            else:
                assert len(terminal) == 1 and exec_answers[-1] is terminal[0], exec_answers
        for waiter in self.waiters:
            got = self.answers.get(id(waiter), [])
            assert len(got) == (0 if id(waiter) in self.gone_waiters else 1), got
        if not self.unloaded:
            assert self.sim.state == ("inactive", "dead"), f"unit left {self.sim.state}"
        refusals = [a for a in exec_answers if "internal error:" in str(getattr(a, "text", ""))]
        assert not refusals, "the table refused a realistic input"


def test_random_walks_keep_the_invariants():
    """A few thousand seeded walks (FUZZ_SEED, FUZZ_WALKS) keep every invariant."""
    for seed in range(SEED, SEED + WALKS):
        walk = Walk(seed)
        try:
            walk.run(walk.rng.randrange(5, 60))
            walk.check()
        except AssertionError as exc:
            trace = "\n".join(walk.trace[-40:])
            raise AssertionError(f"FUZZ_SEED={seed} FUZZ_WALKS=1: {exc}\n{trace}") from exc
