"""The upgrade's way to the broker: every wait on the reactor, bounded, and stoppable.

Requests go out in rounds (cli/ask.py), to one rank or to all at once, and are
collected on the reactor until ``timeout``. SIGINT, SIGTERM and SIGHUP only take note
and stop the reactor: the procedure then raises Interrupted at its next wait, and the
restore that follows (``restoring``) is not cut short by them. Also the command's
progress lines (``say``). No blocking
``future.get()``: flux turns SIGINT back to its default action while one blocks, which
would end the command without bringing service back.
"""

import os
import signal
import sys

import flux.constants

from flux_sdexec.cli.ask import Round, run_reactor

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def say(text):
    """One line of the command's progress, on stdout."""
    emit(f"upgrade: {text}", sys.stdout)


def error(text):
    """One line of what went wrong or was restored, on stderr."""
    emit(f"flux-sdexec: upgrade: {text}", sys.stderr)


def emit(line, stream):
    """Print ``line``; a terminal gone (the SIGHUP of a closed session) must not stop the
    restore, so a failed write is dropped."""
    try:
        print(line, file=stream, flush=True)
    except OSError:
        pass


class Failure(Exception):
    """A step failed: the message says which and why."""


class Interrupted(Failure):
    """A signal asked the command to stop."""

    def __init__(self, signum):
        self.signum = signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")


class Broker:
    """Bounded, interruptible requests on handle ``h``; ``timeout`` bounds each wait."""

    def __init__(self, h, timeout):
        self.h = h
        self.timeout = timeout
        self.signals = []  # signals received, in order
        self.restoring = False  # set once bringing service back: signals no longer stop
        self._wake = None

    # ---- signals ----

    def catch_signals(self):
        """From now on SIGINT, SIGTERM and SIGHUP are noted and stop the reactor."""
        r, w = os.pipe()
        for fd in (r, w):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(w)
        for signum in SIGNALS:
            signal.signal(signum, lambda signum, frame: self.signals.append(signum))
        self._wake = self.h.fd_watcher_create(r, self._woken, events=flux.constants.FLUX_POLLIN)
        self._wake.start()

    def _woken(self, handle, watcher, fd, revents, args):
        try:
            os.read(fd, 64)
        except BlockingIOError:
            pass
        if self.signals and not self.restoring:
            self.h.reactor_stop()

    def check(self):
        """Raise Interrupted if a signal came (not while restoring)."""
        if self.signals and not self.restoring:
            raise Interrupted(self.signals[0])

    def run(self, seconds, done):
        """Run the reactor until ``done()``, ``seconds`` pass, or a signal stops it."""
        stopped = lambda: done() or (bool(self.signals) and not self.restoring)  # noqa: E731
        while True:
            try:
                run_reactor(self.h, seconds, stopped)
                break
            except KeyboardInterrupt:  # flux's own SIGINT watcher, inside reactor_run
                self.signals.append(signal.SIGINT)
        self.check()

    def pause(self, seconds):
        self.run(seconds, lambda: False)

    # ---- requests ----

    def send_each(self, requests):
        """A Round with ``{rank: (topic, payload)}`` sent at once (keyed by rank)."""
        round_ = Round(self.h)
        for rank, (topic, payload) in requests.items():
            round_.send(rank, topic, payload, rank)
        return round_

    def collect(self, round_, what):
        """Wait (at most the timeout) for ``round_``'s answers: {rank: payload or Failure}."""
        self.check()
        self.run(self.timeout, lambda: not round_.waiting)
        return {
            key: outcome(a, f"{what} on rank {a.rank}", self.timeout)
            for key, a in round_.answers.items()
        }

    def ask(self, topic, payload, ranks, what):
        """``topic`` to every rank of ``ranks`` at once: {rank: payload or Failure}."""
        round_ = self.send_each({rank: (topic, payload) for rank in ranks})
        answers = self.collect(round_, what)
        round_.close()
        return answers

    def call(self, topic, payload, rank, what):
        """One request; its payload (a dict), or Failure."""
        answer = self.ask(topic, payload, [rank], what)[rank]
        if isinstance(answer, Failure):
            raise answer
        return answer


def outcome(answer, what, timeout):
    """An Answer as its payload (a dict), or a Failure saying what went wrong."""
    if answer.error is not None:
        return Failure(f"{what}: {answer.error[1]}")
    if answer.payload is None:
        return Failure(f"{what}: no answer within {timeout:g}s")
    return answer.payload or {}
