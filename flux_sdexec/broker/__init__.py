"""The flux side: the service that wires the parts, requests and responses, stdio channels,
watchers, job memos, and the post-start checks' reads of /proc and cgroupfs.

Below it, ``flux_sdexec.usage`` (what units used), ``flux_sdexec.systemd`` (everything that
talks to the systemd manager), ``flux_sdexec.containment`` and the pure ``flux_sdexec.core``;
above it, ``modules/``.
"""
