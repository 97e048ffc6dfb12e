"""The PCI address of a logical GPU, from what hwloc shows of it (pure).

hwloc usually hangs a GPU's osdev off its PCI device: the address is that parent's. Some
backends do not (hwloc 2.9's OpenCL on a VM puts it under the host bridge). Then the address
is given only when exactly one device can be meant: one GPU-class PCI device of a GPU
driver's vendor under the osdev's parent, that no other osdev of the backend hangs off,
with no other parentless osdev of the backend beside it, and that its driver confirms.
Anything else fails closed: a wrong device in DeviceAllow would breach containment.
Imports no libhwloc and reads no file: the driver's word comes in as ``confirm``.
"""

import errno
from dataclasses import dataclass

from flux_sdexec.containment.mapper.devices import GPU_VENDORS

PARENT = "parent"
FIX = (
    "no address is guessed (a wrong device in DeviceAllow breaches containment): use hwloc "
    "with the CUDA or NVML backend (each GPU then hangs off its PCI device) or a mapper of "
    "the site's own (sdexec.mapper)"
)


@dataclass(frozen=True)
class GpuAddress:
    """A GPU's PCI address and how it was found (``parent``, or the one candidate)."""

    address: str
    found: str


def find(gpu, confirm):
    """(the ``GpuAddress`` of ``gpu``, an ``HwlocGpu``, or None; why there is none).

    Args:
        confirm: ``confirm(address, vendor_id)`` -> (the vendor's driver holds it, evidence).
    """
    if gpu.parent is not None:
        return GpuAddress(gpu.parent, PARENT), ""
    candidates = [d.address for d in gpu.candidates if d.vendor_id in GPU_VENDORS]
    where = f"under {gpu.ancestor}"
    if not candidates:
        return None, f"no GPU of {' or '.join(GPU_VENDORS.values())} {where} is free to be it"
    if len(candidates) > 1:
        return None, f"{len(candidates)} PCI devices {where} could be it: {', '.join(candidates)}"
    if gpu.rivals:
        return None, (
            f"{', '.join(gpu.rivals)} also hangs off {gpu.ancestor} without a PCI device, "
            f"so the one candidate, {candidates[0]}, is not known to be its"
        )
    vendor = next(d.vendor_id for d in gpu.candidates if d.address == candidates[0])
    confirmed, evidence = confirm(candidates[0], vendor)
    if not confirmed:
        return None, (
            f"the one candidate {where}, {candidates[0]}, is not confirmed by its driver "
            f"(no {evidence})"
        )
    return GpuAddress(candidates[0], f"the one candidate {where}, confirmed by {evidence}"), ""


def locate(index, gpu, confirm):
    """The ``GpuAddress`` of logical GPU ``index``, an ``HwlocGpu`` (see ``find``).

    Raises:
        OSError: ENODEV naming the GPU, the candidates and the fix, when no one device
            can be meant.
    """
    address, why = find(gpu, confirm)
    if address is None:
        raise OSError(
            errno.ENODEV,
            f"gpu{index} ({gpu.name}, {gpu.backend}) hangs off no PCI device in the topology "
            f"and {why}; {FIX}",
        )
    return address
