"""Errors raised by flux-sdexec: every one is an OSError carrying an errno.

Adapters answer a request with ``respond_error(msg, exc.errno, str(exc))``;
the two subclasses say whose fault the error is.
"""


class SdexecError(OSError):
    """Root of every error flux-sdexec raises on purpose."""

    def __str__(self):
        return self.strerror or super().__str__()


class RequestError(SdexecError):
    """The client sent something we cannot accept."""


class UnitError(SdexecError):
    """systemd or the D-Bus connection refused or failed."""
