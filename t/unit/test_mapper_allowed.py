"""[sdexec] allowed-devices: every validation rule, and expansion over a temporary /dev."""

import os
import stat

import pytest

from flux_sdexec.containment.mapper import allowed


def mknod(path, kind=stat.S_IFCHR):
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(path, kind | 0o600, os.makedev(1, 3))


@pytest.fixture
def dev(tmp_path):
    """A /dev with char devices cxi0, cxi1, dri/renderD128, a block device sda, a regular
    file cxi9, a directory cxi-dir, a link into it and one out of it."""
    root = tmp_path / "dev"
    try:
        for name in ("cxi0", "cxi1", "dri/renderD128"):
            mknod(root / name)
        mknod(root / "sda", stat.S_IFBLK)
    except PermissionError:
        pytest.skip("mknod needs root")
    (root / "cxi9").write_text("not a device")
    (root / "cxi-dir").mkdir()
    os.symlink("cxi1", root / "cxi-link")
    outside = tmp_path / "elsewhere"
    mknod(outside)
    os.symlink(outside, root / "cxi-out")
    return root


def test_defaults_and_perms():
    """perms default to rw; one to three distinct letters of rwm are kept."""
    assert allowed.parse(["/dev/cxi*", "/dev/fuse rwm", "/dev/kvm  r "]) == [
        ("/dev/cxi*", "rw"),
        ("/dev/fuse", "rwm"),
        ("/dev/kvm", "r"),
    ]
    assert allowed.parse(None) == [] and allowed.parse([]) == []


@pytest.mark.parametrize(
    "value, text",
    [
        ("/dev/cxi*", "sdexec.allowed-devices is not an array"),
        ({"a": "/dev/x"}, "is not an array"),
        ([7], "sdexec.allowed-devices[0] is not a string"),
        (["/dev/null", None], "sdexec.allowed-devices[1] is not a string"),
        ([""], "sdexec.allowed-devices[0] is empty"),
        (["   "], "is empty"),
        (["/dev/x rw extra"], "expected '<glob> [perms]'"),
        (["/etc/passwd"], "is not a path under /dev/"),
        (["dev/null"], "is not a path under /dev/"),
        (["/dev"], "is not a path under /dev/"),
        (["/dev/"], "is not a path under /dev/"),
        (["/dev/../etc/shadow"], "contains '..'"),
        (["/dev/dri/../../etc"], "contains '..'"),
        (["/dev/**"], "contains '**'"),
        (["/dev/a**b"], "contains '**'"),
        (["/dev/x rx"], "permissions 'rx'"),
        (["/dev/x rwmr"], "permissions 'rwmr'"),
        (["/dev/x rr"], "permissions 'rr'"),
    ],
)
def test_refused(value, text):
    """Each malformed value is refused with a reason naming the entry."""
    with pytest.raises(ValueError) as info:
        allowed.parse(value)
    assert text in str(info.value)


def test_expand_devices_only(dev):
    """Only char and block devices match, sorted; files, directories and nothing-matched skip."""
    patterns = allowed.parse(["/dev/cxi*", "/dev/sd?  r", "/dev/nothing*", "/dev/dri/render*"])
    assert allowed.expand(patterns, str(dev)) == [
        "/dev/cxi-link rw",
        "/dev/cxi0 rw",
        "/dev/cxi1 rw",
        "/dev/dri/renderD128 rw",
        "/dev/sda r",
    ]


def test_symlink_outside_dev_skipped(dev):
    """A link resolving outside /dev is skipped; one inside keeps the link's name."""
    entries = allowed.expand(allowed.parse(["/dev/cxi-*"]), str(dev))
    assert entries == ["/dev/cxi-link rw"]


def test_duplicates_removed(dev):
    """Two patterns matching one device give one entry."""
    assert allowed.expand(allowed.parse(["/dev/cxi0", "/dev/cxi[0]"]), str(dev)) == ["/dev/cxi0 rw"]


def test_new_device_seen_at_next_expand(dev):
    """A device node created after a first expansion is in the next one."""
    patterns = allowed.parse(["/dev/hsn*"])
    assert allowed.expand(patterns, str(dev)) == []
    mknod(dev / "hsn0")
    assert allowed.expand(patterns, str(dev)) == ["/dev/hsn0 rw"]


@pytest.mark.parametrize(
    "current, entries, result",
    [
        (None, ["/dev/cxi0 rw"], "/dev/cxi0 rw"),
        ("", ["/dev/cxi0 rw"], "/dev/cxi0 rw"),
        ("/dev/kfd rw,/dev/cxi0 rw", ["/dev/cxi0 rw", "/dev/cxi1 rw"], None),
    ],
)
def test_append(current, entries, result):
    """Entries are appended to DeviceAllow without duplicating one already there."""
    expected = result or "/dev/kfd rw,/dev/cxi0 rw,/dev/cxi1 rw"
    assert allowed.append(current, entries) == expected
