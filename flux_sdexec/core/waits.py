"""Waitable processes: a parked wait, the zombie kept for it, collecting its status.

Handlers and steps of table.py's rows for ``sdexec.wait`` (see lifecycle.py for
the calling convention). A wait is answered only once the output read so far is
in (DrainOutput, then OutputDrained), so the retained tail is complete.

The answer grace: a wait parked while the process ran may belong to a client that is
leaving just as the process ends (job-exec removed as a job shell exits: the answer
reaches a module that no longer reads). So the answer to a parked wait does not let
the record go at once: it is hidden (a second wait gets "not found", as in
flux-core) and its unit stays loaded for ANSWER_GRACE seconds. If the client that got
the answer disconnects within the grace, the record is revived: a zombie again,
collectable by label or pid. A grace that ends with the client still connected lets
the unit go. A wait answered at once (the process was over when it came) lets the
record go at once, as before: its client was there a moment ago to ask.

The claim window: a zombie no client is known to wait for (revived, or of a unit adopted from
an earlier sdexec) is kept CLAIM_WINDOW seconds for one to ask, then let go, so that a
record whose answer was in fact read, or whose job is over, leaves no unit behind. A
zombie of this sdexec's own exec waits for its wait as long as it takes, as before.
The claim window of an adopted record counts from the moment a collecting client is there
(ClaimsStart: the first ``sdexec.wait`` this sdexec gets, or ``flux sdexec upgrade``
announcing job-exec's load), not from its load: job-exec, the one that collects them,
is loaded only after sdexec on every rank, however long the slowest rank takes; until
then it is bounded by FIRST_WAIT_BOUND.
A label is free for a new exec as soon as a wait has given the status (in the grace,
or revived): the record goes then (label_reused), as flux-core's C module forgets it at
once; the new exec waits for the old unit to go (broker/after_release.py).

The keep: a job shell's rank may end long before its job (uneven ranks, a leader's
post-processing), and a job-exec loaded again (``flux sdexec upgrade``, ``flux module
reload job-exec``) asks every rank's shell by label, the finished ones too; flux-core's
C module has let the record go by then, and the job dies (``wait label=... not found``).
So a job shell's record answered to a parked wait, or in a claim window (revived, adopted)
and answered, has the answer grace, and one whose grace ends with its client still there is
kept, hidden as in the grace, while its job runs: the orphan watch asks for the job's state
(WatchJob) and JobGone lets it go, KEPT_MAX at the most. Its client leaving revives it as in
the grace, in a claim window until the next client's first wait: the job-exec that
reattaches gets the status, once per job-exec reload. A clean unload hands it over
(handoff.py), and the next sdexec adopts it as a zombie in a claim window.
Pure: stdlib only.
"""

import syslog

from flux_sdexec.core import impfatal
from flux_sdexec.core.events import AnswerWait, ArmGrace, DrainOutput, Log, WatchJob
from flux_sdexec.core.shelljobs import shell_job
from flux_sdexec.core.states import Claim, ProcState

S = ProcState

# A departing module's disconnect follows its last read by the time its teardown takes
# (milliseconds); 2 s covers a busy broker, and only jobs that end that close before a
# job-exec removal are revived without need.
ANSWER_GRACE = 2.0
# job-exec loaded again asks by label within seconds of its load (the upgrade loads it
# right after sdexec); short enough that a record nobody asks for is soon gone. Every
# short-lived client of a parked wait (flux sproc wait) revives its record as it exits,
# so the claim window is also how long such a unit stays listed.
CLAIM_WINDOW = 20.0
# Until then (the first wait, or the upgrade's announce), an adopted record is kept at
# most this long: far
# beyond the longest time `flux sdexec upgrade` can take from a rank's sdexec load to
# job-exec's (its check and job-exec's load, each bounded by its 120 s --timeout, and a
# restore), so it only matters where no wait ever comes (no job-exec, or no job on the
# rank whose record it is): then the unit still goes.
FIRST_WAIT_BOUND = 600.0
# The longest a job shell's answered record is kept for a job-exec that reattaches, its job
# still running (the orphan watch lets it go once the job is inactive): a week, beyond
# most sites' longest time limit.
KEPT_MAX = 7 * 24 * 3600.0


def output_drained(p, event, out):
    if p.wait.waiter is None:
        return p.state
    return collect(p, out, drained=True)


def wait_requested(p, event, out):
    p.wait.waiter = event.waiter
    p.wait.parked = p.state is not S.ZOMBIE
    if p.state is S.ZOMBIE:
        return collect(p, out)
    return p.state


def waiter_gone(p, event, out):
    p.wait.waiter, p.wait.parked = None, False
    return p.state


def retain_or_drop(p, out):
    if not p.cmd.waitable:
        return S.DONE
    if p.wait.waiter is not None:
        return collect(p, out)
    if p.orphan is not None:  # stopped because its job is over (orphans.py)
        return release(p, out)
    if p.adopted:
        return open_claim(p, out, "no waiter after adoption")
    return S.ZOMBIE


def collect(p, out, drained=False):
    """Answer the waiter with the status (or stored error) once the output read so far is
    in; then keep the record for the answer grace (a parked wait, or a job shell's record
    in a claim window, revived or adopted: the keep follows) or let it go."""
    if not drained and p.output_open:
        out.append(DrainOutput())
        return S.ZOMBIE
    impfatal.conclude(p, out)  # its stderr is read: an IMP's fatal line is the answer
    w = p.wait
    waiter, parked, w.waiter, w.parked = w.waiter, w.parked, None, False
    if p.error is not None:
        out.append(AnswerWait(waiter, error=p.error))
    else:
        out.append(AnswerWait(waiter, p.unit.wait_status, tuple(w.retained.items)))
    claimed, w.claim = w.claim is not Claim.NONE, Claim.NONE
    if not parked and not (claimed and shell_job(p) is not None):
        return release(p, out)
    w.answered_to = waiter
    out.append(ArmGrace(ANSWER_GRACE))
    return S.ANSWERED


def answer_maybe_lost(p, event, out):
    """The answered client left within the grace, or while a kept record's job runs:
    collectable again, unless a newer process took the label meanwhile (then there would
    be two). A kept one is in a claim window until the next client's first wait: that is the
    job-exec that reattaches."""
    p.wait.answered_to = None
    if event.label_taken:
        out.append(Log(syslog.LOG_INFO, f"{p.logname}[{p.pid}]: label reused, not revived"))
        return release(p, out)
    p.wait.claim = Claim.REVIVED
    if p.wait.kept:
        p.wait.kept, p.wait.before_first_wait = False, True
        return open_claim(p, out, f"its waiter left while job {shell_job(p)} runs")
    return open_claim(p, out, f"its waiter left within {ANSWER_GRACE:g}s of the answer")


def label_reused(p, event, out):
    """A new exec asks for the label of a record whose status a wait already gave (in its
    grace, or revived): the label is free at once, as in the C module; the record goes.
    A record never answered (a zombie waiting for its wait) keeps it."""
    if p.state not in (S.ANSWERED, S.ZOMBIE) or not p.label_free:
        return p.state
    p.wait.answered_to, p.wait.claim = None, Claim.NONE
    out.append(Log(syslog.LOG_INFO, f"{p.logname}[{p.pid}]: label taken by a new exec, let go"))
    return release(p, out)


def open_claim(p, out, why):
    if p.wait.claim is Claim.NONE:
        p.wait.claim = Claim.OPEN
    if p.wait.before_first_wait:
        seconds = FIRST_WAIT_BOUND
        until = f"{CLAIM_WINDOW:g}s after the first wait (at most {seconds:g}s)"
    else:
        seconds = CLAIM_WINDOW
        until = f"{seconds:g}s"
    out += [Log(syslog.LOG_INFO, f"{p.logname}[{p.pid}]: {why}: collectable for {until}")]
    out.append(ArmGrace(seconds))
    return S.ZOMBIE


def claims_start(p, event, out):
    """A collecting client is there: an adopted record's claim window starts now."""
    if not p.wait.before_first_wait:
        return p.state
    p.wait.before_first_wait = False
    if p.state is S.ZOMBIE and p.wait.claim is not Claim.NONE and p.wait.waiter is None:
        return open_claim(p, out, event.why)
    return p.state


def grace_expired(p, event, out):
    """End of the answer grace (a job shell's record is kept then), of a kept record's
    keep, or of a record's claim window: let the unit go."""
    if p.state is S.ANSWERED:
        job = shell_job(p)
        if p.wait.kept:
            text = f"{p.logname}[{p.pid}]: kept {KEPT_MAX:g}s, let go"
            out.append(Log(syslog.LOG_INFO, text))
        elif job is not None:
            p.wait.kept = True
            why = f"answered; kept while job {job} runs, for a job-exec that reattaches"
            out += [Log(syslog.LOG_DEBUG, f"{p.logname}[{p.pid}]: {why}"), ArmGrace(KEPT_MAX)]
            out.append(WatchJob())
            return S.ANSWERED
        p.wait.answered_to, p.wait.kept = None, False
        return release(p, out)
    if p.state is S.ZOMBIE and p.wait.claim is not Claim.NONE and p.wait.waiter is None:
        p.wait.claim = Claim.NONE
        seconds = FIRST_WAIT_BOUND if p.wait.before_first_wait else CLAIM_WINDOW
        text = f"{p.logname}[{p.pid}]: not collected within {seconds:g}s, let go"
        out.append(Log(syslog.LOG_INFO, text))
        return release(p, out)
    return p.state  # an expiry that raced with a new arm or a collect


def release(p, out):
    out += p.forget()
    return S.DONE if p.unit.gone else S.RELEASING
