"""Unit naming: instance rendering, rank suffix decision, labels and verbatim names."""

import errno
import re

import pytest

from flux_sdexec.core.errors import RequestError
from flux_sdexec.core.naming import UnitNamer, check_unit_name, needs_rank_suffix, render_instance


def test_render_instance_nested_paths_become_f58plain():
    """/ƒA/ƒB renders as fA:fB; the leading separator is dropped."""
    assert render_instance("/ƒ2Xz/ƒABC", False, "") == "f2Xz:fABC"
    assert render_instance("/f2Xz", False, "") == "f2Xz"


def test_render_instance_design_example():
    """The design's /sys/ƒJOBID becomes sys:fJOBID."""
    assert render_instance("/sys/ƒ4Hz9", False, "") == "sys:f4Hz9"


def test_render_instance_unnamed_top_level():
    """An unnamed top level is sys for the system instance, else t + 8 hex of rank 0's uuid."""
    assert render_instance("/", True, "ABCDEF01-2345") == "sys"
    assert render_instance("/", False, "ABCDEF01-2345-6789") == "tabcdef01"


def test_render_instance_never_yields_an_invalid_name():
    """Characters a unit name cannot hold become '_'; ƒ always becomes f."""
    assert render_instance("/ƒ0l/a b/c@d", False, "") == "f0l:a_b:c_d"


@pytest.mark.parametrize(
    "mapping, expected",
    [
        (None, True),
        ("", True),
        ("[]", True),
        ("not json", True),
        ('{"version":1,"map":[[0,4,1,1]]}', False),
        ("[[0,1,1,1]]", False),
        ('{"version":1,"map":[[0,1,2,1]]}', True),
        ("[[0,2,1,2]]", True),
        ("[[0,2,1,1],[1,1,1,1]]", True),
        ('{"version":1}', True),
    ],
)
def test_needs_rank_suffix(mapping, expected):
    """The rank is added when the taskmap is missing, unusable or puts >1 broker on a node."""
    assert needs_rank_suffix(mapping) is expected


def test_namer_label_and_rank():
    """<label>:<instance>.service, with -<rank> when brokers share a node."""
    assert UnitNamer("tabc", 3, False).name("shell-fA") == "shell-fA:tabc.service"
    assert UnitNamer("tabc", 3, True).name("shell-fA") == "shell-fA-3:tabc.service"


def test_namer_uuid_name_matches_instance_glob():
    """A label-less unit is a truncated UUID that still ends in :<instance>.service."""
    namer = UnitNamer("tabc", 1, True)
    name = namer.name()
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-1:tabc\.service", name)
    assert namer.glob == "*:tabc.service"
    assert namer.name() != name


def test_namer_override_is_verbatim():
    """SDEXEC_NAME wins over label and instance."""
    assert UnitNamer("tabc", 0, True).name("lbl", "t2409-x.service") == "t2409-x.service"


@pytest.mark.parametrize("label", ["a:b", "a/b", "a b", "ünï", "x" * 300, "a@b"])
def test_namer_rejects_unusable_labels(label):
    """A label with ':' or that cannot form a unit name is EINVAL, naming the label."""
    with pytest.raises(RequestError) as info:
        UnitNamer("tabc", 0, False).name(label)
    assert info.value.errno == errno.EINVAL
    assert "cannot form a unit name" in str(info.value) or "invalid unit name" in str(info.value)


@pytest.mark.parametrize("name", ["x", "a/b.service", "../x.service", "a.socket", 7, ""])
def test_check_unit_name_rejects(name):
    """Verbatim names must still be service unit names systemd accepts."""
    with pytest.raises(RequestError) as info:
        check_unit_name(name)
    assert info.value.errno == errno.EINVAL


def test_only_an_unnamed_top_level_test_instance_needs_rank_0s_uuid():
    from flux_sdexec.core.naming import needs_instance_uuid

    assert needs_instance_uuid("/", False)
    assert not needs_instance_uuid("/", True)  # the system instance: sys
    assert not needs_instance_uuid("/ƒ2Xz", False)  # a job's instance: its jobid path
    assert not needs_instance_uuid("/ƒ2Xz/ƒABC", True)
