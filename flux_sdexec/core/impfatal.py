"""The IMP's own error, read from a multi-user job shell's stderr.

A multi-user job shell runs under flux-security's IMP (``flux-imp exec``, the unit's
main process). When the IMP refuses to run the shell (a wrong ``allowed-shells``, a bad
signature, PAM, the shell not executable) it prints one line on stderr, ``flux-imp:
Fatal: <why>`` (imp_die; the IMP has no other fatal prefix), and exits non-zero. A plain
exit would tell job-exec nothing: a job of one shell ends with exit code 1 and no
exception, a job of several with "terminated before first barrier". So when the command
is the IMP, the last such line is kept (bounded), and a non-zero exit after it is answered
as the error EPERM with that line as its text: job-exec raises "job shell exec error on
broker <host> (rank N): flux-imp: Fatal: ..." (exit code 126).

A job shell's node is then drained, as job-exec drains a multi-user shell that ended
before its first barrier ("could indicate an unrecoverable node issue"), but only if
systemd says the IMP never reported READY=1 (Type=notify: the unit never became active,
``Unit.never_active``): before that no code of the job's user has run, so the line cannot
be one the user wrote on the shared stderr. The stderr line only gives the drain its text;
what decides it is systemd's account of the unit: every signal since the start seen
without "active", or, after signals were lost (a reconnect), a read whose
ActiveEnterTimestamp is 0. A unit that was ever active, or whose history is unknown (a
read that does not say, a unit systemd forgot meanwhile), never drains the node: a user
who writes ``flux-imp: Fatal: x`` and exits non-zero fails their own job (EPERM) and
nothing more. Pure: stdlib and the core only.
"""

import errno
import os
import syslog

from flux_sdexec.core.shelljobs import shell_job
from flux_sdexec.core.events import DrainRank, Log

IMP_NAME = "flux-imp"
FATAL_PREFIX = b"flux-imp: Fatal: "
MAX_LINE = 512  # bytes of the line kept; the IMP's messages are far shorter


def runs_imp(cmdline):
    """True when ``cmdline`` runs the IMP (argv[0]'s basename is ``flux-imp``)."""
    return bool(cmdline) and os.path.basename(cmdline[0]) == IMP_NAME


class ImpErrorLine:
    """The last ``flux-imp: Fatal:`` line seen on a stderr stream (``line``, or None)."""

    __slots__ = ("line",)

    def __init__(self):
        self.line = None

    def see(self, chunk):
        """Look at one stderr chunk (bytes, one line in line mode, any text in raw mode)."""
        if FATAL_PREFIX not in chunk:
            return
        for text in chunk.splitlines():
            if text.startswith(FATAL_PREFIX):
                self.line = text[:MAX_LINE].decode(errors="replace").rstrip()


def watch_for(cmd):
    """An ImpErrorLine for a command that runs the IMP with its stderr read, else None."""
    if runs_imp(cmd.cmdline) and "stderr" in cmd.streams:
        return ImpErrorLine()
    return None


def may_fail(p):
    """SdProc ``p`` runs the IMP and exited non-zero: its answer waits for its stderr."""
    u = p.unit
    return p.answers.imp_error is not None and u.finished and not u.signaled and u.status != 0


def failure(p):
    """``(EPERM, line)`` when ``p``'s IMP exited non-zero after a fatal line, else None.
    Asked once its stderr is read to the end (or drained)."""
    if may_fail(p) and p.answers.imp_error.line is not None:
        return (errno.EPERM, p.answers.imp_error.line)
    return None


def drain_reason(p):
    """The drain reason for ``p``'s IMP failure, or None when the node is not drained: not
    a job shell, or systemd does not say the IMP never reported ready (it did, and the
    job's own code may have run; or its history is unknown)."""
    job = shell_job(p)
    if job is None or not p.unit.never_active or p.answers.imp_error.line is None:
        return None
    return f"IMP error for job {job}: {p.answers.imp_error.line}"


def conclude(p, out):
    """Once ``p``'s stderr is all read: store the IMP's failure as ``p``'s error (answered
    by the caller as any stored error), log it, and drain the rank when it is due."""
    if p.error is not None:
        return
    error = failure(p)
    if error is None:
        return
    p.error = error
    reason = drain_reason(p)
    out.append(Log(syslog.LOG_ERR, f"{p.logname}[{p.pid}]: {error[1]}"))
    if reason is not None:
        out.append(DrainRank(reason))
