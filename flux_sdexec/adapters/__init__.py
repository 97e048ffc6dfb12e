"""Adapters: the only flux-sdexec code that touches flux, pystemd or file descriptors."""
