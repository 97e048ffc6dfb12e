"""flux sdexec: the admin's command for flux-sdexec (``flux sdexec --help``).

flux runs ``flux-<name>.py`` found on FLUX_EXEC_PATH under its own Python. `make install` puts
this file in flux's command directory; from a checkout, put this folder first:
``FLUX_EXEC_PATH_PREPEND=<checkout>/cmd flux sdexec ...``.
"""

import sys
from pathlib import Path

# From a checkout this file sits beside its package: import that one, not an installed copy.
_ROOT = Path(__file__).resolve().parents[1]
if (_ROOT / "flux_sdexec" / "__init__.py").is_file():
    sys.path.insert(0, str(_ROOT))

from flux_sdexec.cli.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
