"""OOM kills from the kernel log, for the units whose memory cgroup is on cgroup v1.

v1 counts a kill only in the victim's memory cgroup, removed with the unit before sdexec
hears of its exit; the kernel logs one ``oom-kill:`` record per kill naming that cgroup.
/dev/kmsg is read without blocking, from where it stood at load, when a unit's figures are
read (``kills``): nothing runs between exits. Needs read access to /dev/kmsg (root, or
CAP_SYSLOG with ``kernel.dmesg_restrict``); without it the count is None.
"""

import errno
import os

from flux_sdexec.usage.cgroup_usage import oom_kill_slice

MAX_SLICES = 4096  # kills of slices no unit claimed are dropped beyond this
MAX_RECORDS = 100000  # per drain: the ring holds far fewer


class OomLog:
    """OOM kill counts per accounting slice, from /dev/kmsg records logged since load."""

    def __init__(self, fd):
        self.fd = fd  # non-blocking, one record per read; None: no kernel log
        self.counts = {}

    @classmethod
    def open(cls, path="/dev/kmsg"):
        """The log from its end, or one that counts nothing (None) if it cannot be read."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return cls(None)
        try:
            os.lseek(fd, 0, os.SEEK_END)
        except OSError:
            os.close(fd)
            return cls(None)
        return cls(fd)

    def kills(self, name, final):
        """The kills counted for slice ``name``, or None without /dev/kmsg; ``final`` (its
        unit exited): forgotten once given."""
        if self.fd is None:
            return None
        self._drain()
        return self.counts.pop(name, 0) if final else self.counts.get(name, 0)

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def _drain(self):
        for _ in range(MAX_RECORDS):
            try:
                record = os.read(self.fd, 8192)
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # records overwritten before they were read
                    continue
                raise
            if not record:
                return
            name = oom_kill_slice(record.decode(errors="replace"))
            if name is not None:
                if name not in self.counts and len(self.counts) >= MAX_SLICES:
                    self.counts.pop(next(iter(self.counts)))
                self.counts[name] = self.counts.get(name, 0) + 1
