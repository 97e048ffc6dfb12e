"""Resource containment: a job's R to systemd unit properties (the sdexec-mapper module's logic)."""

from flux_sdexec.mapper.base import ResourceMapper
from flux_sdexec.mapper.hwloc_mapper import HwlocMapper

__all__ = ["ResourceMapper", "HwlocMapper"]
