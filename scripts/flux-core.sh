#!/bin/bash
# make flux-core: build and install flux-core (with systemd support) from a release tarball.
#
#   FLUX_CORE_TARBALL  path of a flux-core release tarball (made by flux-core's `make dist`);
#                      default: the one scripts/tarball.sh picks (../shared/vendor, the URL)
#   FLUX_CORE_SHA256   its expected sha256 (optional; checked when given)
#   FLUX_CORE_BUILD    where the build tree is kept, for `make check-upstream`
#                      (default /var/tmp/flux-sdexec/<tarball name without .tar.gz>)
#   FLUX_CORE_PREFIX   install prefix (default /usr/local)
#   FLUX_PYTHON        the Python flux-core's commands, its bindings and our module run under:
#                      one every user can run (default /usr/bin/python3, the distribution's)
#
# Configured --with-flux-security when flux-security (the IMP, make flux-security) is installed:
# run make flux-security first.
#
# Does nothing when a flux-core >= FLUX_CORE_MIN_VERSION with systemd support, running FLUX_PYTHON
# and (when flux-security is installed) built with it, is installed under the prefix and its
# build tree is complete (the tarball's when one is named, else FLUX_CORE_BUILD or any kept).
# Installed but with no build tree: builds the tree, installs nothing. An installed one that
# differs is rebuilt.
set -euo pipefail
# shellcheck source=scripts/build-lib.sh
. "$(dirname "$0")/build-lib.sh"

MIN_VERSION=${FLUX_CORE_MIN_VERSION:-0.88.0}
PREFIX=${FLUX_CORE_PREFIX:-/usr/local}
PYTHON=${FLUX_PYTHON:-/usr/bin/python3}  # checked once the build dependencies (python3-dev) are in
TARBALL=${FLUX_CORE_TARBALL:-}
say() { echo "flux-core: $*"; }
die() { echo "flux-core: $*" >&2; exit 1; }

# Debian packages flux-core's configure needs (from its scripts/install-deps-deb.sh, less docs/tests
# extras). python3-setuptools: configure's Python check imports it (Python 3.12 dropped distutils,
# which it otherwise falls back on; Debian 13's python3 is 3.13).
DEB_DEPS="make gcc g++ pkg-config libc6-dev libzmq3-dev uuid-dev libjansson-dev liblz4-dev
    libarchive-dev libhwloc-dev libsqlite3-dev lua5.1 liblua5.1-dev lua-posix libsystemd-dev
    libsodium-dev libncurses-dev jq time python3-dev python3-setuptools python3-cffi python3-yaml
    python3-jsonschema python3-ply"

installed_version() {
    local out
    out=$("$PREFIX/bin/flux" version 2>/dev/null) || return 1
    grep -q '+systemd' <<<"$out" || return 1
    sed -n 's/^commands:[[:space:]]*//p' <<<"$out"
}

version_ok() {  # is $1 >= MIN_VERSION (numeric parts only)?
    [ "$(printf '%s\n%s\n' "$MIN_VERSION" "${1%%-*}" | sort -V | head -1)" = "$MIN_VERSION" ]
}

mismatch() {  # why the installed flux-core does not fit what this script builds, if it does not
    local py
    py=$("$PREFIX/bin/flux" python -c 'import sys; print(sys.executable)' 2>/dev/null) || py=none
    [ "$(readlink -f "$py")" = "$(readlink -f "$PYTHON")" ] || { echo "runs Python $py, not $PYTHON"; return; }
    if pkg-config --exists flux-security 2>/dev/null &&
        ! "$PREFIX/bin/flux" version 2>/dev/null | grep '^libflux-security:' >/dev/null; then
        echo "was built without flux-security, which is installed now"
    fi
}

have=$(installed_version || true)
if [ -n "$have" ] && ! version_ok "$have"; then
    say "$PREFIX/bin/flux is $have, older than $MIN_VERSION: building"
    have=
fi
why=$([ -z "$have" ] || mismatch)
if [ -n "$why" ]; then
    [ -n "$TARBALL" ] || die "$PREFIX/bin/flux $have $why; set FLUX_CORE_TARBALL=<release tarball> to rebuild it"
    say "$PREFIX/bin/flux $have $why: building"
    have=
fi
if [ -z "$TARBALL" ]; then
    if [ -n "$have" ]; then
        tree=$(flux_core_build)
        if flux_core_built "$tree"; then
            say "flux-core $have (+systemd) is installed in $PREFIX and $tree is built: nothing to do"
            exit 0
        fi
    fi
    TARBALL=$("$(dirname "$0")/tarball.sh" flux-core) ||
        die "${have:+flux-core $have is installed, but $(flux_core_no_build), and }no flux-core" \
            "release tarball to build from (above): set FLUX_CORE_TARBALL=<release tarball>"
fi
[ -f "$TARBALL" ] || die "FLUX_CORE_TARBALL=$TARBALL: no such file"
TARBALL=$(cd "$(dirname "$TARBALL")" && pwd)/$(basename "$TARBALL")
BUILD=$(flux_core_build_for "$TARBALL")

if [ -n "$have" ] && flux_core_built "$BUILD"; then
    say "flux-core $have (+systemd) is installed in $PREFIX and $BUILD is built: nothing to do"
    exit 0
fi
[ -z "$have" ] || say "flux-core $have (+systemd) is installed in $PREFIX, but there is no build tree" \
    "at $BUILD (check-upstream and the v2 tier need one): building it, installing nothing"

check_sha256 "$TARBALL" "${FLUX_CORE_SHA256:-}" FLUX_CORE_SHA256
# shellcheck disable=SC2086
install_build_deps $DEB_DEPS
[ -x "$PYTHON" ] || die "FLUX_PYTHON=$PYTHON is not an executable"
for mod in cffi yaml jsonschema ply; do
    "$PYTHON" -c "import $mod" 2>/dev/null || die "$PYTHON lacks the Python module $mod (Debian: python3-$mod)"
done

rm -rf "$BUILD"
mkdir -p "$(dirname "$BUILD")"
say "unpacking into $BUILD"
tmp=$(mktemp -d "$(dirname "$BUILD")/unpack.XXXXXX")
tar -xzf "$TARBALL" -C "$tmp"
top=("$tmp"/*)
[ ${#top[@]} -eq 1 ] && [ -x "${top[0]}/configure" ] || die "$TARBALL is not a flux-core release tarball"
mv "${top[0]}" "$BUILD"
rmdir "$tmp"

cd "$BUILD"
log="$BUILD/flux-sdexec-build.log"
say "configure, make -j$(nproc) (a few minutes); log in $log"
start=$SECONDS
security=
pkg-config --exists flux-security 2>/dev/null && security=--with-flux-security
# flux.service where systemd looks for a local admin's units: left to configure, it is the
# prefix followed by systemd.pc's directory (Debian 12: /usr/local/lib/systemd/system; Debian 13,
# merged /usr: /usr/local/usr/lib/systemd/system, where systemd never looks)
./configure --prefix="$PREFIX" --disable-docs $security PYTHON="$PYTHON" \
    --with-systemdsystemunitdir="$PREFIX/lib/systemd/system" >"$log" 2>&1 ||
    { tail -30 "$log" >&2; die "configure failed (see $log)"; }
grep -q '^#define HAVE_LIBSYSTEMD 1' config/config.h ||
    die "configure did not find libsystemd: install libsystemd-dev and run again"
make -j"$(nproc)" >>"$log" 2>&1 || { tail -30 "$log" >&2; die "make failed (see $log)"; }
if [ -z "$have" ]; then
    make install >>"$log" 2>&1 || { tail -30 "$log" >&2; die "make install failed (see $log)"; }
    ldconfig 2>/dev/null || true
    have=$(installed_version) || die "installed, but $PREFIX/bin/flux version does not show +systemd"
    say "installed flux-core $have in $PREFIX"
fi
sha256sum <"$TARBALL" | cut -d' ' -f1 >"$BUILD/.flux-sdexec-built"  # what was built: the v2 guest's image hashes it
say "built in $((SECONDS - start)) s; build tree kept at $BUILD (FLUX_CORE_BUILD for make check-upstream)"
