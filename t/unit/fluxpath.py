"""Make flux's Python bindings importable for the few unit tests of adapters that import
flux's constants or watchers (holds.py, bus.py): flux's own path, as ``flux env`` gives it."""

import subprocess
import sys


def add():
    try:
        import flux  # noqa: F401
    except ImportError:
        out = subprocess.run(
            ["flux", "env", "sh", "-c", "echo $PYTHONPATH"], capture_output=True, text=True
        ).stdout
        sys.path[1:1] = [p for p in out.strip().split(":") if p]
