#!/bin/sh
# install-reconnect.sh TEMPLATE FLUX_SHELL DESTDIR PATH: make install-reconnect (part of make
# install). Write flux-shell-reconnect from TEMPLATE (cmd/flux-shell-reconnect.in) with
# flux-core's job shell FLUX_SHELL, an absolute path, single-quoted in it whatever it holds,
# and install it as DESTDIR/PATH, mode 0755.
#
# A site names the file in the IMP's allowed-shells: whoever can write it, or a directory
# above it, runs code as every user who submits a job. So, installed as root, it is root's
# (root:root) and so are the directories made for it (umask 022), and the install refuses,
# in one line and before writing anything, when a directory on its path (up to DESTDIR, the
# target's /) is not root's or is group- or other-writable: a PREFIX the instance owner can
# write is that escalation. Installed as another user (a personal instance, a package built
# without fakeroot) it cannot be root's: one line says it is not fit for allowed-shells.
set -eu
template=$1 shell=$2 destdir=$3 path=$4
me=install-reconnect

case $shell in
"") echo "$me: cannot find flux's job shell (flux config builtin shell_path); set FLUX_SHELL" >&2
    exit 1 ;;
/*) ;;
*) echo "$me: FLUX_SHELL must be an absolute path: $shell" >&2
    exit 1 ;;
esac
umask 022
uid=$(id -u)

# check DIR: root's and not group- or other-writable, or refuse
check() {
    owner=$(stat -c %u -- "$1")
    mode=$(stat -c %a -- "$1")
    if [ "$owner" != 0 ] || [ $((0$mode & 022)) != 0 ]; then
        echo "$me: $1 is writable by a user other than root (owner uid $owner, mode $mode):" \
            "flux-shell-reconnect goes in the IMP's allowed-shells; install it where every" \
            "directory is root's and not group- or other-writable (PREFIX, MODULE_DIR)" >&2
        exit 1
    fi
}

target=$destdir$path
dir=$(dirname -- "$target")
if [ "$uid" = 0 ]; then
    [ -z "$destdir" ] || mkdir -p -- "$destdir"
    top=$(cd -- "${destdir:-/}" && pwd -P)
    d=$dir
    while [ ! -d "$d" ]; do d=$(dirname -- "$d"); done  # what exists of the way there
    d=$(cd -- "$d" && pwd -P)  # as the kernel walks it: through symlinks
    while :; do
        check "$d"
        if [ "$d" = "$top" ] || [ "$d" = / ]; then break; fi
        d=$(dirname -- "$d")
    done
fi

# the path single-quoted for sh ('\'' for each quote), put in by awk's index and substr:
# nothing in it is a pattern or a replacement
quoted=$(printf '%s\n' "$shell" | sed "s/'/'\\\\''/g")
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
QUOTED=$quoted awk '{
    i = index($0, "@FLUX_SHELL@")
    if (i) $0 = substr($0, 1, i - 1) ENVIRON["QUOTED"] substr($0, i + length("@FLUX_SHELL@"))
    print
}' "$template" >"$tmp"
mkdir -p -- "$dir"
if [ "$uid" = 0 ]; then
    install -o 0 -g 0 -m 0755 "$tmp" "$target"
else
    install -m 0755 "$tmp" "$target"
    echo "$me: $target is uid $uid's, not root's: not fit for the IMP's allowed-shells" >&2
fi
