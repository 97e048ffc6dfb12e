"""Show the systemd properties a mapper gives for resource ids, without a broker.

    python3 -m flux_sdexec.map --cores 0-3 [--gpus 0] [--xml FILE] [--mapper CLASS]
                               [--allowed-devices PATTERN ...] [--root DIR]
    python3 -m flux_sdexec.map --list-gpus [--xml FILE] [--root DIR]
    flux sdexec map ...        (the same options and output)

Without ``--xml`` the topology is this machine's (read by libhwloc); without
``--cores`` and ``--gpus`` every core and GPU of the topology is used. Prints the
properties as JSON; ``--list-gpus`` prints instead each GPU of the topology with its
PCI address and how it was found. ``--root`` reads a copy of a node's /sys, /dev and
/proc. ``flux_sdexec.map.HwlocMapper`` is the default mapper's name in the
sdexec-mapper configuration and stats.
"""

import argparse
import json
import os
import sys

from flux_sdexec.containment.mapper import HwlocMapper, ResourceMapper, allowed
from flux_sdexec.containment.mapper.devices import GpuDevices
from flux_sdexec.containment.mapper.gpu_address import FIX, find
from flux_sdexec.containment.mapper.mapper_service import load_class
from flux_sdexec.containment.mapper.topology import Topology
from flux_sdexec.core.values import encode_idset

__all__ = ["HwlocMapper", "ResourceMapper", "main"]


def build_R(cores, gpus, rank=0):
    """A one-rank R (RFC 20) holding ``cores`` and ``gpus`` (idset strings)."""
    children = {"core": cores}
    if gpus:
        children["gpu"] = gpus
    return {"version": 1, "execution": {"R_lite": [{"rank": str(rank), "children": children}]}}


DESCRIPTION = "Print the systemd unit properties a mapper gives for resource ids."


def add_arguments(p):
    """The options, on argparse parser ``p`` (``flux sdexec map`` has the same)."""
    p.add_argument("--cores", metavar="IDSET", help="logical cores, e.g. 0-3 (default: all)")
    p.add_argument("--gpus", metavar="IDSET", help="logical GPUs, e.g. 0-1")
    p.add_argument("--xml", metavar="FILE", help="hwloc topology XML (default: this machine)")
    p.add_argument("--mapper", metavar="CLASS", help="fully-qualified mapper class")
    p.add_argument(
        "--allowed-devices",
        metavar="PATTERN",
        nargs="+",
        action="extend",
        default=None,
        help="[sdexec] allowed-devices entries, e.g. '/dev/cxi*' or '/dev/fuse rwm'",
    )
    p.add_argument(
        "--root",
        metavar="DIR",
        help="read the node's files under DIR/sys, DIR/dev and DIR/proc (default: /)",
    )
    p.add_argument(
        "--list-gpus",
        action="store_true",
        help="list each GPU of the topology: backend, PCI address and how it was found",
    )
    return p


ROOTS = {"sysfs": "sys", "dev": "dev", "proc": "proc"}
NO_GPU = (
    "flux_sdexec.map: no GPU in the topology (hwloc shows GPUs through its CUDA, NVML, "
    "OpenCL or RSMI backend: is one installed?)"
)


def roots(root):
    """The ``sysfs``, ``dev`` and ``proc`` roots of a node whose files are under ``root``."""
    return {name: os.path.join(root or "/", path) for name, path in ROOTS.items()}


def gpu_table(topology, devices):
    """(the lines of the GPU list, whether every GPU has a PCI address)."""
    rows = [("GPU", "BACKEND", "OSDEV", "PCI", "FOUND")]
    for i, gpu in enumerate(topology.gpus()):
        address, why = find(gpu, devices.confirm)
        if address is None:
            rows.append((str(i), gpu.backend, gpu.name, "-", f"none: {why}"))
        else:
            rows.append((str(i), gpu.backend, gpu.name, address.address, address.found))
    widths = [max(len(row[c]) for row in rows) for c in range(4)]
    lines = [" ".join(v.ljust(w) for v, w in zip(row, widths)) + " " + row[4] for row in rows]
    return lines, all(row[3] != "-" for row in rows)


def run(opts):
    """Print the properties for parsed options ``opts``; returns the exit code."""
    try:
        patterns = allowed.parse(opts.allowed_devices)
        if opts.xml:
            with open(opts.xml) as f:
                xml = f.read()
        else:
            xml = Topology().export_xml()
        if opts.list_gpus:
            lines, complete = gpu_table(Topology(xml), GpuDevices(**roots(opts.root)))
            print("\n".join(lines))
            if len(lines) == 1:
                print(NO_GPU, file=sys.stderr)
            if not complete:
                print(
                    f"flux_sdexec.map: a GPU without a PCI address fails its jobs: {FIX}",
                    file=sys.stderr,
                )
            return 0 if complete else 1
        cls = load_class(opts.mapper) if opts.mapper else HwlocMapper
        cores, gpus = opts.cores, opts.gpus
        if cores is None and gpus is None:
            topology = Topology(xml)
            cores = encode_idset(range(topology.count_cores()))
            gpus = encode_idset(range(len(topology.gpus())))
        mapper = cls(xml, 0, **roots(opts.root)) if opts.root else cls(xml, 0)
        props = mapper.map(json.dumps(build_R(cores or "", gpus)))
        if props and patterns:
            entries = allowed.expand(patterns, roots(opts.root)["dev"])
            if entries:
                props["DeviceAllow"] = allowed.append(props.get("DeviceAllow"), entries)
    except (OSError, ValueError, TypeError, ImportError, AttributeError) as exc:
        text = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        print(f"flux_sdexec.map: {text}", file=sys.stderr)
        return 1
    print(json.dumps(props, indent=2))
    return 0


def main(argv=None):
    """CLI entry point; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python3 -m flux_sdexec.map", description=DESCRIPTION)
    return run(add_arguments(parser).parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
