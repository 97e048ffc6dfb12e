"""Show the systemd properties a mapper gives for resource ids, without a broker.

    python3 -m flux_sdexec.map --cores 0-3 [--gpus 0] [--xml FILE] [--mapper CLASS]
                               [--allowed-devices PATTERN ...]
    flux sdexec map ...        (the same options and output)

Without ``--xml`` the topology is this machine's (read by libhwloc); without
``--cores`` and ``--gpus`` every core and GPU of the topology is used. Prints the
properties as JSON. ``flux_sdexec.map.HwlocMapper`` is the default mapper's name
in the sdexec-mapper configuration and stats.
"""

import argparse
import json
import sys

from flux_sdexec.containment.mapper import HwlocMapper, ResourceMapper, allowed
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
    return p


def run(opts):
    """Print the properties for parsed options ``opts``; returns the exit code."""
    try:
        patterns = allowed.parse(opts.allowed_devices)
        if opts.xml:
            with open(opts.xml) as f:
                xml = f.read()
        else:
            xml = Topology().export_xml()
        cls = load_class(opts.mapper) if opts.mapper else HwlocMapper
        cores, gpus = opts.cores, opts.gpus
        if cores is None and gpus is None:
            topology = Topology(xml)
            cores = encode_idset(range(topology.count_cores()))
            gpus = encode_idset(range(len(topology.gpus())))
        props = cls(xml, 0).map(json.dumps(build_R(cores or "", gpus)))
        if props and patterns:
            entries = allowed.expand(patterns)
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
