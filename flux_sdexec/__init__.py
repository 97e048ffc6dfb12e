"""flux-sdexec: flux-core's sdexec subprocess service as a Python broker module."""

from flux_sdexec._version import __version__

__all__ = ["__version__"]
