"""Adapters: the only flux-sdexec code that touches flux, pystemd or file descriptors.

The module's two boundaries: flux (requests, channels, outbox, watchers) in this folder, and
systemd in the ``systemd`` package.
"""
