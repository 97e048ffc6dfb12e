"""What the sdexec-mapper module does, apart from flux messages.

Holds the topology XML (fetched once, on first use), the configured mapper class,
``exec.sdexec-properties`` and the allowed-devices patterns. The mapper itself is
built lazily and rebuilt after a config reload; allowed devices are expanded at
every lookup, so a device node created later is included without a reload.
"""

import errno
import importlib
import sys

from flux_sdexec.containment.mapper import allowed

DEFAULT_MAPPER = "flux_sdexec.map.HwlocMapper"  # the class built when the config names none
# ...and what stats call it then (``mapper_class``): flux-core's name for its default, which
# flux-core's t2416 expects; ``mapper_impl`` names the class built
FLUX_CORE_DEFAULT = "flux.sdexec.map.HwlocMapper"


def load_class(name):
    """The class named by a fully-qualified name (``package.module.Class``)."""
    module, _, cls = name.rpartition(".")
    if not module:
        raise ValueError(f"mapper must be a fully-qualified class name: {name!r}")
    return getattr(importlib.import_module(module), cls)


class Settings:
    """The mapper's configuration, validated.

    Raises:
        ValueError: a key has the wrong type or allowed-devices is malformed.
    """

    def __init__(self, conf):
        sdexec = conf.get("sdexec", {})
        exec_ = conf.get("exec", {})
        if not isinstance(sdexec, dict) or not isinstance(exec_, dict):
            raise ValueError("[sdexec] and [exec] must be tables")
        self.mapper = sdexec.get("mapper")
        self.searchpath = sdexec.get("mapper-searchpath", "")
        for key, value in (("mapper", self.mapper), ("mapper-searchpath", self.searchpath)):
            if value is not None and not isinstance(value, str):
                raise ValueError(f"sdexec.{key} is not a string")
        self.patterns = sdexec.get("allowed-devices") or []
        self.allowed = allowed.parse(sdexec.get("allowed-devices"))
        self.extra = exec_.get("sdexec-properties", {})
        if not isinstance(self.extra, dict):
            raise ValueError("exec.sdexec-properties is not a table")


class MapperService:
    """Lookups and stats for one broker rank.

    Args:
        rank: this broker's rank.
        conf: the broker's configuration object.
        fetch_xml: returns the node's hwloc XML (``resource.topo-get``), called once.
        dev: device tree root for allowed-devices (tests).
    """

    def __init__(self, rank, conf, fetch_xml, dev="/dev"):
        self.rank = rank
        self.settings = Settings(conf)
        self._fetch_xml = fetch_xml
        self._dev = dev
        self._xml = None
        self._mapper = None
        self.requests = 0

    def reconfigure(self, conf):
        """Take a new configuration; a bad one raises ValueError and changes nothing."""
        self.settings = Settings(conf)
        self._mapper = None

    def _init_mapper(self):
        if self._xml is None:
            xml = self._fetch_xml()
            if not xml:
                raise OSError(errno.ENODATA, "topo-get returned no payload")
            self._xml = xml
        for path in reversed([p for p in self.settings.searchpath.split(":") if p]):
            if path not in sys.path:
                sys.path.insert(0, path)
        cls = load_class(self.settings.mapper or DEFAULT_MAPPER)
        self._mapper = cls(self._xml, self.rank)

    def lookup(self, R):
        """systemd properties for this rank's share of R, allowed devices appended.

        Raises:
            OSError: from the mapper or the topology fetch (its errno).
            Exception: anything else a mapper raised (the module answers EINVAL).
        """
        if self._mapper is None:
            self._init_mapper()
        props = self._mapper.map(R, extra_properties=self.settings.extra)
        if not isinstance(props, dict):
            raise ValueError(f"mapper returned {type(props).__name__}, not a dict")
        if props and self.settings.allowed:
            entries = allowed.expand(self.settings.allowed, self._dev)
            if entries:
                props["DeviceAllow"] = allowed.append(props.get("DeviceAllow"), entries)
        self.requests += 1
        return props

    def stats(self):
        """``flux module stats sdexec-mapper``: configuration and successful lookups.

        ``mapper_class`` is the configured name, or flux-core's name for the default mapper
        when none is configured (as flux-core's module reports it); ``mapper_impl`` is the
        fully-qualified name of the class built (ours for the default).
        """
        if self._mapper is None:
            self._init_mapper()
        return {
            "config": {
                "mapper_class": self.settings.mapper or FLUX_CORE_DEFAULT,
                "mapper_impl": self.settings.mapper or DEFAULT_MAPPER,
                "mapper_searchpath": self.settings.searchpath,
                "allowed_device_patterns": list(self.settings.patterns),
                "allowed_devices": allowed.expand(self.settings.allowed, self._dev),
            },
            "requests": self.requests,
        }
