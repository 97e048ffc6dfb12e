"""A node's hwloc topology, read by libhwloc: cores to CPUs and NUMA nodes, GPUs as hwloc has them.

Loads the XML the way flux-core's resource module and rhwloc_map do (I/O types
KEEP_IMPORTANT, instruction caches KEEP_STRUCTURE, not "this system", no
restriction), so logical indexes mean the same thing as in a job's R. The only
module that touches libhwloc.
"""

import errno
import os
from dataclasses import dataclass
from typing import Optional, Tuple

from flux_sdexec.containment.mapper import _hwloc_abi as abi
from flux_sdexec.containment.mapper._hwloc_abi import ffi

# hwloc "Backend" infos of OS devices flux-core counts as GPUs (rhwloc.c)
GPU_BACKENDS = ("CUDA", "NVML", "OpenCL", "RSMI")
# PCI base classes a GPU has: display controller, processing accelerator
GPU_CLASSES = (0x03, 0x12)


@dataclass(frozen=True)
class PciDevice:
    """A PCI device of the topology: ``dddd:bb:dd.f`` address, class and vendor ids."""

    address: str
    class_id: int
    vendor_id: int


@dataclass(frozen=True)
class HwlocGpu:
    """One logical GPU as hwloc shows it.

    ``parent`` is the address of its PCI ancestor. Without one, ``ancestor`` names the
    osdev's parent, ``candidates`` the GPU-class PCI devices under it that no other GPU
    osdev of the same backend hangs off, and ``rivals`` the other GPU osdevs of the same
    backend without a PCI ancestor under that parent.
    """

    name: str
    backend: str
    parent: Optional[str]
    ancestor: str = ""
    candidates: Tuple[PciDevice, ...] = ()
    rivals: Tuple[str, ...] = ()


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
        """The GPUs (``HwlocGpu``) in logical GPU order.

        A GPU is an OS device of a compute backend. One PCI device seen through
        several backends (CUDA and OpenCL) counts once; partitions of one device
        under the same backend (AMD CPX/TPX) count separately, and a GPU without a
        PCI ancestor always counts, as in flux-core, so the ids are those of R.
        """
        dedup = not os.environ.get("FLUX_HWLOC_GPU_NO_DEDUP")
        osdevs = [
            (obj, _info(obj, "Backend"), _pci_ancestor(obj))
            for obj in self._objects(abi.OBJ_OS_DEVICE)
            if _info(obj, "Backend") in GPU_BACKENDS
        ]
        seen, gpus = [], []
        for obj, backend, pci in osdevs:
            if dedup and pci is not None and any(p == pci and b != backend for p, b in seen):
                continue
            seen.append((pci, backend))
            if pci is not None:
                gpus.append(HwlocGpu(_name(obj), backend, _pci_address(pci)))
            else:
                gpus.append(self._orphan(obj, backend, osdevs))
        return gpus

    def _orphan(self, obj, backend, osdevs):
        """The ``HwlocGpu`` of a GPU osdev without a PCI ancestor."""
        parent = obj.parent
        claimed = [pci for _, b, pci in osdevs if b == backend and pci is not None]
        candidates = tuple(
            _pci_device(pci)
            for pci in self._objects(abi.OBJ_PCI_DEVICE)
            if pci.attr.pcidev.class_id >> 8 in GPU_CLASSES
            and _under(pci, parent)
            and not any(pci == c for c in claimed)
        )
        rivals = tuple(
            _name(o)
            for o, b, pci in osdevs
            if b == backend and pci is None and o != obj and o.parent == parent
        )
        return HwlocGpu(_name(obj), backend, None, self._describe(parent), candidates, rivals)

    def _describe(self, obj):
        """``bridge 0000:[00-00]`` for a bridge, else hwloc's type and logical index."""
        if obj.type == abi.OBJ_BRIDGE:
            down = obj.attr.bridge.downstream.pci
            return f"bridge {down.domain:04x}:[{down.secondary_bus:02x}-{down.subordinate_bus:02x}]"
        kind = ffi.string(self._lib.hwloc_obj_type_string(obj.type)).decode()
        return f"{kind} L#{obj.logical_index}"


def _name(obj):
    return ffi.string(obj.name).decode() if obj.name != ffi.NULL else ""


def _under(obj, ancestor):
    parent = obj.parent
    while parent != ffi.NULL and parent != ancestor:
        parent = parent.parent
    return parent != ffi.NULL


def _pci_address(pci):
    a = pci.attr.pcidev
    return f"{a.domain:04x}:{a.bus:02x}:{a.dev:02x}.{a.func:x}"


def _pci_device(pci):
    a = pci.attr.pcidev
    return PciDevice(_pci_address(pci), a.class_id, a.vendor_id)
