"""The public name of the mapper CLI and default mapper (``python3 -m flux_sdexec.map``,
``mapper = "flux_sdexec.map.HwlocMapper"``), kept where sites and scripts already use it;
the code is in ``flux_sdexec.containment.mapper.command``.
"""

import sys

from flux_sdexec.containment.mapper.command import HwlocMapper, ResourceMapper, main

__all__ = ["HwlocMapper", "ResourceMapper", "main"]

if __name__ == "__main__":
    sys.exit(main())
