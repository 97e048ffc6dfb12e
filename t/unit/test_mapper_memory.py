"""Scaled memory caps are exact bytes, never 0 for a share above 0 (issue 22, #2).

flux-core (and this mapper before) wrote ``round(N * share)%``: ``MemoryMax=50%`` on a node
with 128 PUs gave a 1-PU job ``0%``, which became MemoryMaxScale=0 (systemd 252 refuses it:
"Value specified in MemoryMaxScale is out of range"), and 95% x 1/64 gave 1% instead of
1.484375%. Now a percentage is N% of the memory systemd scales by, times the share, in
whole pages rounded down, as systemd's ``physical_memory_scale`` rounds.
"""

import errno

import pytest
from conftest import xml

from flux_sdexec.core import properties
from flux_sdexec.containment.mapper import HwlocMapper, memory

GIB = 1 << 30
PAGE = 4096


def node_16g():
    return 16 * GIB, PAGE


def test_half_the_memory_on_a_128_pu_node_for_one_pu():
    """50% x 1/128 of 16 GiB is 64 MiB, not 0%."""
    assert memory.scale_caps({"MemoryMax": "50%"}, 1, 128, node_16g) == {"MemoryMax": str(64 << 20)}


def test_95_percent_for_a_sixty_fourth_of_the_node():
    """95% x 1/64 is 1.484375% (255012864 bytes in whole pages), not 1%."""
    got = memory.scale_caps({"MemoryMax": "95%", "MemoryHigh": "90%"}, 1, 64, node_16g)
    assert got == {"MemoryMax": str(62259 * PAGE), "MemoryHigh": str(58982 * PAGE)}
    assert 62259 * PAGE == 255012864


def test_a_tiny_share_is_one_page_and_zero_stays_zero():
    """A share above 0 is never 0 bytes (systemd refuses MemoryMax=0); 0% is 0 (no swap)."""
    assert memory.scale("1%", 1, 4096, lambda: (GIB, PAGE)) == str(PAGE)
    assert memory.scale("0%", 1, 2, node_16g) == "0"


def test_memory_is_read_only_for_percentages():
    def unreadable():
        raise AssertionError("physical memory read for a size")

    assert memory.scale_caps({"MemoryMax": "8G"}, 1, 4, unreadable) == {"MemoryMax": str(2 * GIB)}
    assert memory.scale_caps({"MemoryMax": "-5%", "MemoryHigh": "x%"}, 1, 4, unreadable) == {}


def test_the_bytes_become_a_memory_limit_systemd_accepts():
    """sdexec sends the mapped value as MemoryMax bytes, not MemoryMaxScale."""
    (value,) = memory.scale_caps({"MemoryMax": "50%"}, 1, 128, node_16g).values()
    assert properties.unit_properties({"SDEXEC_PROP_MemoryMax": value}) == [
        ("MemoryMax", "t", 64 << 20)
    ]


def test_unreadable_node_memory_fails_the_lookup(node):
    """No MemTotal: the mapping fails with the reason, rather than a wrong cap."""
    (node.proc / "meminfo").unlink()
    mapper = HwlocMapper(xml("synthetic"), 0, **node.roots())
    R = {"version": 1, "execution": {"R_lite": [{"rank": "0", "children": {"core": "0"}}]}}
    with pytest.raises(OSError) as info:
        mapper.map(R, extra_properties={"MemoryMax": "50%"})
    assert info.value.errno == errno.ENOENT
    assert info.value.strerror.startswith("failed to scale memory caps: cannot read the node's")
