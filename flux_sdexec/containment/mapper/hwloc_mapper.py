"""HwlocMapper: cores, GPUs and memory caps from the node's hwloc topology.

Drop-in for flux-core's default mapper (``cls(xml, rank)``): logical cores become
``AllowedCPUs`` (PU OS indexes) and ``AllowedMemoryNodes``; logical GPUs become
one comma-separated ``DeviceAllow``; memory caps of ``extra_properties`` are
scaled by allocated/total PUs. Differences from flux-core are listed in doc/guide/containment.md.
"""

import errno

from flux_sdexec.containment import host
from flux_sdexec.containment.mapper import memory
from flux_sdexec.containment.mapper.base import ResourceMapper
from flux_sdexec.containment.mapper.devices import GpuDevices
from flux_sdexec.containment.mapper.gpu_address import locate
from flux_sdexec.containment.mapper.topology import Topology
from flux_sdexec.core.values import encode_idset, parse_idset


def _ids(text, what):
    try:
        return parse_idset(text)
    except ValueError:
        raise OSError(errno.EINVAL, f"failed to map {what}: invalid id string {text!r}") from None


class HwlocMapper(ResourceMapper):
    """The default mapper.

    Args:
        xml: hwloc topology XML of this node (``resource.topo-get``).
        rank: this broker's rank.
        sysfs, dev, proc: roots where GPU device nodes are looked up (tests).

    Raises:
        OSError: EINVAL when the XML cannot be loaded.
    """

    def __init__(self, xml, rank=0, sysfs="/sys", dev="/dev", proc="/proc"):
        super().__init__(rank)
        self.topology = Topology(xml)
        self.devices = GpuDevices(sysfs, dev, proc)
        self._proc = proc

    def map_cores(self, cores):
        """``AllowedCPUs`` and ``AllowedMemoryNodes`` for logical cores (an idset string).

        Raises:
            OSError: ENOENT naming a core the node does not have.
        """
        try:
            cpus, nodes = self.topology.cores(_ids(cores, "cores"))
        except OSError as exc:
            raise OSError(exc.errno, f"failed to map cores: {exc.strerror}") from None
        return {"AllowedCPUs": encode_idset(cpus), "AllowedMemoryNodes": encode_idset(nodes)}

    def map_gpus(self, gpus):
        """One ``DeviceAllow`` for logical GPUs (an idset string); ``{}`` for none.

        Raises:
            OSError: ENOENT naming a GPU the node does not have, ENODEV for a missing node
                or a GPU whose PCI device is not known.
        """
        if not gpus:
            return {}
        found = self.topology.gpus()
        entries = []
        for i in _ids(gpus, "GPUs"):
            if i >= len(found):
                raise OSError(
                    errno.ENOENT,
                    f"failed to map GPUs: gpu{i} not found in local topology "
                    f"(gpu count={len(found)})",
                )
            try:
                address = locate(i, found[i], self.devices.confirm).address
            except OSError as exc:
                raise OSError(exc.errno, f"failed to map GPUs: {exc.strerror}") from None
            entries += self.devices.gpu(address)
        return {"DeviceAllow": ",".join(dict.fromkeys(entries))}

    def finalize_properties(self, properties, R, extra_properties=None):
        """``DevicePolicy=closed``, then memory caps scaled to this job's share of the PUs."""
        properties = super().finalize_properties(properties, R, extra_properties)
        if extra_properties and "AllowedCPUs" in properties:
            allocated = len(parse_idset(properties["AllowedCPUs"]))
            total = self.topology.count()
            caps = memory.scale_caps(extra_properties, allocated, total, self.physical_memory)
            properties.update(caps)
        return properties

    def physical_memory(self):
        """``(bytes, page size)`` systemd scales ``N%`` memory caps by on this node.

        Raises:
            OSError: the node's memory cannot be read.
        """
        try:
            return host.physical_memory(self._proc)
        except (OSError, ValueError) as exc:
            why = getattr(exc, "strerror", None) or str(exc)
            raise OSError(
                getattr(exc, "errno", None) or errno.EINVAL,
                f"failed to scale memory caps: cannot read the node's memory: {why}",
            ) from None
