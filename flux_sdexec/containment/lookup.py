"""Resource containment in sdexec: what the mapper said, merged into a request (pure).

sdexec asks ``sdexec-mapper.lookup`` for a command carrying ``SDEXEC_R_LOCAL``
(protocol §8). Its properties override ``SDEXEC_PROP_*`` (and so
``exec.sdexec-properties``); enforcement.py then verifies them after the start.
A failed lookup fails the exec with the mapper's reason.
"""

import errno
import re

from flux_sdexec.core.errors import RequestError
from flux_sdexec.core.properties import PREFIX

LOOKUP_TOPIC = "sdexec-mapper.lookup"
NOT_LOADED_TEXT = (
    "resource containment is configured (exec.sdexec-constrain-resources) "
    "but the sdexec-mapper module is not loaded"
)
# errnos job-exec reads as something else: ENOSYS "sdexec service is not loaded",
# EIO a failed post-start check (drains the rank), EHOSTUNREACH a node failure
_MISREAD = (errno.ENOSYS, errno.EIO, errno.EHOSTUNREACH)
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9]*\Z")


def lookup_payload(req):
    """The ``sdexec-mapper.lookup`` request: R_local as flux-core sends it (a JSON string)."""
    return {"R": req.r_local}


def lookup_error(errnum, text):
    """The RequestError that fails the exec when the lookup failed."""
    if errnum == errno.ENOSYS:
        return RequestError(errno.EOPNOTSUPP, NOT_LOADED_TEXT)
    if errnum in _MISREAD:
        errnum = errno.EINVAL
    return RequestError(errnum, f"resource mapping failed: {text}")


def apply(req, mapped):
    """Merge the mapper's properties into ``req`` (mapper wins over SDEXEC_PROP_*).

    Raises:
        RequestError: EPROTO when the reply is not an object of property-name strings.
    """
    if not isinstance(mapped, dict):
        raise RequestError(errno.EPROTO, f"{LOOKUP_TOPIC}: reply is not an object")
    for name, value in mapped.items():
        if not _NAME.match(name) or not isinstance(value, str):
            raise RequestError(
                errno.EPROTO, f"{LOOKUP_TOPIC}: {name!r} is not a property name with a string"
            )
    opts = dict(req.opts)
    opts.update((PREFIX + name, value) for name, value in mapped.items())
    req.opts = opts
