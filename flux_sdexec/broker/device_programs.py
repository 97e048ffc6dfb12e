"""How many BPF device programs are attached to a cgroup v2 directory (BPF_PROG_QUERY).

On the unified hierarchy a device policy is not a file: systemd (or flux-security's IMP)
attaches a BPF_CGROUP_DEVICE program to the unit's cgroup. The kernel answers the query only
to a caller with CAP_NET_ADMIN (root's manager, root's sdexec); anyone else (EPERM, as under a
seccomp filter), a directory that is no cgroup, or an architecture whose syscall number is not
known here (ENOSYS) gets an OSError saying why.
"""

import ctypes
import errno
import os
import platform
import struct

_BPF_SYSCALL = {"x86_64": 321, "aarch64": 280, "ppc64le": 361, "s390x": 351}
_BPF_PROG_QUERY = 16
_BPF_CGROUP_DEVICE = 6
# union bpf_attr's query: target_fd, attach_type, query_flags, attach_flags (u32 each),
# prog_ids (u64), prog_cnt (u32); the rest of the buffer stays zero, as the kernel requires.
_QUERY = struct.Struct("=IIIIQI")
_ATTR_SIZE = 64
_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded once: asked after every constrained start


def attached(path):
    """The number of BPF device programs attached to cgroup directory ``path``.

    Raises:
        OSError: the kernel did not answer (its errno), or cannot be asked here (ENOSYS).
    """
    number = _BPF_SYSCALL.get(platform.machine())
    if number is None:
        raise OSError(errno.ENOSYS, f"no bpf syscall number known for {platform.machine()}")
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        attr = ctypes.create_string_buffer(_ATTR_SIZE)
        _QUERY.pack_into(attr, 0, fd, _BPF_CGROUP_DEVICE, 0, 0, 0, 0)
        if _LIBC.syscall(number, _BPF_PROG_QUERY, attr, _ATTR_SIZE) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code))
        return _QUERY.unpack_from(attr, 0)[5]
    finally:
        os.close(fd)
