"""The pure core: the state machine and what it reads and writes, as plain data.

No flux, no systemd, no file descriptors (style rule 1): everything here is tested with plain
values in t/unit.
"""
