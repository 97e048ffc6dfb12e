"""The flux side: the service that wires the parts, requests and responses, stdio channels,
watchers, the KVS and job memos, and the reads of /proc, cgroupfs and /dev/kmsg.

Below it, ``flux_sdexec.systemd`` (everything that talks to the systemd manager),
``flux_sdexec.containment`` and the pure ``flux_sdexec.core``; above it, ``modules/``.
"""
