"""sdexec's side of containment: SDEXEC_R_LOCAL parsing, merging the mapper's reply, errors."""

import errno

import pytest

from flux_sdexec.core import protocol
from flux_sdexec.containment import lookup
from flux_sdexec.core.errors import RequestError


def request(**opts):
    cmd = {"cmdline": ["/bin/true"], "env": {}, "opts": opts}
    return protocol.parse_exec({"cmd": cmd, "flags": 3}, streaming=True)


def test_r_local_accepted():
    """SDEXEC_R_LOCAL is taken (no longer refused) and sent as R, a JSON string."""
    req = request(SDEXEC_R_LOCAL='{"version":1}')
    assert lookup.lookup_payload(req) == {"R": '{"version":1}'}
    assert request().r_local is None


def test_mapper_overrides_configured_properties():
    """Mapper properties replace SDEXEC_PROP_* of the same name; others stay."""
    req = request(SDEXEC_R_LOCAL="{}", SDEXEC_PROP_MemoryMax="95%", SDEXEC_PROP_MemoryMin="1G")
    lookup.apply(req, {"MemoryMax": "48%", "AllowedCPUs": "0-1"})
    assert {k: v for k, v in req.opts.items() if k.startswith("SDEXEC_PROP_")} == {
        "SDEXEC_PROP_MemoryMax": "48%",
        "SDEXEC_PROP_MemoryMin": "1G",
        "SDEXEC_PROP_AllowedCPUs": "0-1",
    }


@pytest.mark.parametrize("reply", [[], {"AllowedCPUs": 1}, {"": "x"}, {"Bad Name": "x"}])
def test_bad_reply(reply):
    """A reply that is not an object of property strings is EPROTO."""
    with pytest.raises(RequestError) as info:
        lookup.apply(request(SDEXEC_R_LOCAL="{}"), reply)
    assert info.value.errno == errno.EPROTO


@pytest.mark.parametrize(
    "errnum, sent, text",
    [
        (errno.ENOENT, errno.ENOENT, "resource mapping failed: core 9 not found"),
        (errno.ENODEV, errno.ENODEV, "resource mapping failed: core 9 not found"),
        (errno.EIO, errno.EINVAL, "resource mapping failed: core 9 not found"),
        (errno.EHOSTUNREACH, errno.EINVAL, "resource mapping failed: core 9 not found"),
        (errno.ENOSYS, errno.EOPNOTSUPP, lookup.NOT_LOADED_TEXT),
    ],
)
def test_lookup_errors(errnum, sent, text):
    """The mapper's errno and text reach the client; errnos job-exec misreads become EINVAL;
    a mapper that is not loaded says so."""
    exc = lookup.lookup_error(errnum, "core 9 not found")
    assert (exc.errno, exc.strerror) == (sent, text)
    assert "exec.sdexec-constrain-resources" in lookup.NOT_LOADED_TEXT
