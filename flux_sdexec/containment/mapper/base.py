"""ResourceMapper: a job's R to systemd unit properties, one ``map_<type>`` per resource type.

The same extension interface as flux-core's ``flux.sdexec.map.ResourceMapper``:
``map(R, extra_properties=None)`` takes R (JSON text or its object), keeps this
rank's resources, calls ``map_cores(idset)`` and ``map_gpus(idset)`` when the
class has them, merges their dicts and passes the result through
``finalize_properties``. Pure: R is read here, without flux's librlist.
"""

import json

from flux_sdexec.core.values import encode_idset, parse_idset

# R_lite child names and the map_<type> each one feeds (flux-core's rlist keys)
RESOURCE_TYPES = (("core", "cores"), ("gpu", "gpus"))


def local_resources(R, rank):
    """This rank's resources in R: ``{"cores": set, "gpus": set}``, or ``{}`` if R has none.

    Raises:
        ValueError: R is not RFC 20 R version 1.
    """
    if hasattr(R, "encode") and not isinstance(R, str):  # a flux ResourceSet
        R = R.encode()
    if isinstance(R, (str, bytes)):
        R = json.loads(R)
    if not isinstance(R, dict) or R.get("version") != 1:
        raise ValueError("R is not an RFC 20 version 1 object")
    entries = R.get("execution", {}).get("R_lite")
    if not isinstance(entries, list):
        raise ValueError("R has no execution.R_lite array")
    local = {}
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("rank"), str):
            raise ValueError("R_lite entry without a rank idset")
        if rank not in parse_idset(entry["rank"]):
            continue
        children = entry.get("children") or {}
        for child, key in RESOURCE_TYPES:
            ids = local.setdefault(key, set())
            if children.get(child):
                ids.update(parse_idset(children[child]))
    return local


class ResourceMapper:
    """Base class: dispatch to ``map_<type>`` methods, then ``finalize_properties``.

    Args:
        rank: this broker's rank, whose resources are taken from R.
    """

    def __init__(self, rank=0):
        self._rank = rank

    def map(self, R, extra_properties=None):
        """systemd unit properties (a dict of strings) for this rank's resources in R."""
        result = {}
        for rtype, ids in local_resources(R, self._rank).items():
            method = getattr(self, f"map_{rtype}", None)
            if method is not None:
                result.update(method(encode_idset(ids)))
        return self.finalize_properties(result, R, extra_properties=extra_properties)

    def finalize_properties(self, properties, R, extra_properties=None):
        """Add ``DevicePolicy=closed`` when anything was mapped; ``{}`` stays unconstrained."""
        if properties:
            properties["DevicePolicy"] = "closed"
        return properties
