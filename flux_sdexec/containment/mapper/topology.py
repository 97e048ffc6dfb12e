"""A node's hwloc topology, read by libhwloc: cores to CPUs and NUMA nodes, GPUs to PCI addresses.

Loads the XML the way flux-core's resource module and rhwloc_map do (I/O types
KEEP_IMPORTANT, instruction caches KEEP_STRUCTURE, not "this system", no
restriction), so logical indexes mean the same thing as in a job's R. The only
module that touches libhwloc.
"""

import errno
import os

from flux_sdexec.containment.mapper import _hwloc_abi as abi
from flux_sdexec.containment.mapper._hwloc_abi import ffi

# hwloc "Backend" infos of OS devices flux-core counts as GPUs (rhwloc.c)
GPU_BACKENDS = ("CUDA", "NVML", "OpenCL", "RSMI")


def _info(obj, name):
    for i in range(obj.infos_count):
        if ffi.string(obj.infos[i].name).decode() == name:
            return ffi.string(obj.infos[i].value).decode()
    return None


def _pci_ancestor(obj):
    parent = obj.parent
    while parent != ffi.NULL and parent.type != abi.OBJ_PCI_DEVICE:
        parent = parent.parent
    return parent if parent != ffi.NULL else None


class Topology:
    """One hwloc topology.

    Args:
        xml: hwloc topology XML (a string); None loads this machine's topology.

    Raises:
        OSError: EINVAL when the XML cannot be loaded, ENOSYS without libhwloc 2.x.
    """

    def __init__(self, xml=None):
        self._lib = abi.open_library()
        topo = ffi.new("hwloc_topology_t *")
        if self._lib.hwloc_topology_init(topo) < 0:
            raise OSError(errno.ENOMEM, "hwloc_topology_init failed")
        self._topo = topo[0]
        try:
            self._load(xml)
        except BaseException:
            self.close()
            raise

    def _load(self, xml):
        lib, topo = self._lib, self._topo
        lib.hwloc_topology_set_io_types_filter(topo, abi.FILTER_KEEP_IMPORTANT)
        lib.hwloc_topology_set_icache_types_filter(topo, abi.FILTER_KEEP_STRUCTURE)
        if xml is not None:
            buf = xml.encode() if isinstance(xml, str) else bytes(xml)
            # some hwloc/libxml2 combinations want the NUL counted, others not
            if (
                lib.hwloc_topology_set_xmlbuffer(topo, buf, len(buf) + 1) < 0
                and lib.hwloc_topology_set_xmlbuffer(topo, buf, len(buf)) < 0
            ):
                raise OSError(errno.EINVAL, "hwloc cannot read the topology XML")
        if lib.hwloc_topology_load(topo) < 0:
            raise OSError(errno.EINVAL, "hwloc cannot load the topology XML")

    def close(self):
        """Free the topology (also done when the object is collected)."""
        if getattr(self, "_topo", None) is not None:
            self._lib.hwloc_topology_destroy(self._topo)
            self._topo = None

    __del__ = close

    def export_xml(self):
        """The topology as hwloc XML text."""
        buf, size = ffi.new("char **"), ffi.new("int *")
        if self._lib.hwloc_topology_export_xmlbuffer(self._topo, buf, size, 0) < 0:
            raise OSError(errno.EINVAL, "hwloc cannot export the topology")
        try:
            return ffi.string(buf[0]).decode()
        finally:
            self._lib.hwloc_free_xmlbuffer(self._topo, buf[0])

    def _objects(self, type_):
        depth = self._lib.hwloc_get_type_depth(self._topo, type_)
        if depth == abi.DEPTH_UNKNOWN:
            return []
        if depth == abi.DEPTH_MULTIPLE:
            raise OSError(errno.EINVAL, "hwloc reports invalid depth for the object type")
        count = self._lib.hwloc_get_nbobjs_by_depth(self._topo, depth)
        return [self._lib.hwloc_get_obj_by_depth(self._topo, depth, i) for i in range(count)]

    def count(self, type_=abi.OBJ_PU):
        """Number of objects of an hwloc type (PUs by default)."""
        return len(self._objects(type_))

    def count_cores(self):
        """Number of Core objects."""
        return self.count(abi.OBJ_CORE)

    def cores(self, ids):
        """PU OS indexes and NUMA node OS indexes of logical cores ``ids``.

        Returns:
            (sorted PU ids, sorted NUMA node ids)

        Raises:
            OSError: ENOENT naming the first core the topology does not have.
        """
        lib = self._lib
        cores = self._objects(abi.OBJ_CORE)
        cpuset = ffi.gc(lib.hwloc_bitmap_alloc(), lib.hwloc_bitmap_free)
        for i in sorted(ids):
            if i >= len(cores) or cores[i].cpuset == ffi.NULL:
                raise OSError(errno.ENOENT, f"core {i} not found in node topology")
            lib.hwloc_bitmap_or(cpuset, cpuset, cores[i].cpuset)
        # as hwloc_cpuset_to_nodeset(): NUMA nodes whose cpuset meets the CPUs
        nodes = sorted(
            node.os_index
            for node in self._objects(abi.OBJ_NUMANODE)
            if node.cpuset != ffi.NULL and lib.hwloc_bitmap_intersects(cpuset, node.cpuset)
        )
        return self._bits(cpuset), nodes

    def _bits(self, bitmap):
        ids, i = [], self._lib.hwloc_bitmap_first(bitmap)
        while i >= 0:
            ids.append(i)
            i = self._lib.hwloc_bitmap_next(bitmap, i)
        return ids

    def gpus(self):
        """PCI addresses (``dddd:bb:dd.f``) of the GPUs in logical GPU order.

        A GPU is an OS device of a compute backend. One PCI device seen through
        several backends (CUDA and OpenCL) counts once; partitions of one device
        under the same backend (AMD CPX/TPX) count separately, as in flux-core.
        ``None`` stands for a GPU without a PCI ancestor.
        """
        dedup = not os.environ.get("FLUX_HWLOC_GPU_NO_DEDUP")
        seen, addrs = [], []
        for obj in self._objects(abi.OBJ_OS_DEVICE):
            backend = _info(obj, "Backend")
            if backend not in GPU_BACKENDS:
                continue
            pci = _pci_ancestor(obj)
            if dedup and pci is not None and any(p == pci and b != backend for p, b in seen):
                continue
            seen.append((pci, backend))
            addrs.append(_pci_address(pci) if pci is not None else None)
        return addrs


def _pci_address(pci):
    a = pci.attr.pcidev
    return f"{a.domain:04x}:{a.bus:02x}:{a.dev:02x}.{a.func:x}"
