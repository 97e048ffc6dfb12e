"""Containment: what a unit may use, and whether the kernel enforces it.

- ``lookup``: sdexec-mapper's properties merged into an exec request;
- ``mapper/``: the sdexec-mapper module's logic (a job's R to unit properties), ``command`` its CLI;
- ``cgroups``: where a process's cgroups are, on the three layouts;
- ``enforcement`` (with ``limit_rules``, ``device_rules``, ``verdicts``): the post-start check;
- ``unenforceable``: what this host's user manager never applies, and what it does to a check;
- ``hostlimits``: the host figures systemd scales ``N%`` limits by (``host`` reads them).

Pure but for ``host`` and the mapper (libhwloc through cffi): the other reads are in ``broker``.
"""
