"""Resource containment: a job's R to systemd unit properties (the sdexec-mapper module's logic)."""

from flux_sdexec.containment.mapper.base import ResourceMapper
from flux_sdexec.containment.mapper.hwloc_mapper import HwlocMapper

__all__ = ["ResourceMapper", "HwlocMapper"]
