#!/bin/bash
# make flux-security: build and install flux-security (libflux-security and the IMP, flux-imp)
# from a release tarball. Run it before make flux-core, which then configures --with-flux-security.
#
#   FLUX_SECURITY_TARBALL  path of a flux-security release tarball (made by its `make dist`)
#   FLUX_SECURITY_SHA256   its expected sha256 (optional; checked when given)
#   FLUX_SECURITY_PREFIX   install prefix (default /usr/local)
#
# Configured --sysconfdir=/etc (the IMP reads /etc/flux/imp/conf.d, signing /etc/flux/security)
# and --enable-pam (the IMP's [exec] pam-support). flux-imp is made setuid root, as
# flux-security's packages install it; it does nothing for anyone until a site configures it.
#
# Does nothing when a flux-security >= FLUX_SECURITY_MIN_VERSION with a PAM-enabled flux-imp is
# installed under the prefix.
set -euo pipefail

MIN_VERSION=${FLUX_SECURITY_MIN_VERSION:-0.15.0}
PREFIX=${FLUX_SECURITY_PREFIX:-/usr/local}
TARBALL=${FLUX_SECURITY_TARBALL:-}
IMP=$PREFIX/libexec/flux/flux-imp
export PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
say() { echo "flux-security: $*"; }
die() { echo "flux-security: $*" >&2; exit 1; }

# Debian packages its configure needs (a dist tarball: no autotools).
DEB_DEPS="make gcc pkg-config libc6-dev libsodium-dev libjansson-dev uuid-dev libmunge-dev
    libpam0g-dev"

installed_version() {  # the installed version, if its IMP is there and has PAM support
    local v
    v=$(pkg-config --modversion flux-security 2>/dev/null) || return 1
    [ -x "$IMP" ] && ldd "$IMP" 2>/dev/null | grep libpam >/dev/null || return 1
    [ "$(printf '%s\n%s\n' "$MIN_VERSION" "$v" | sort -V | head -1)" = "$MIN_VERSION" ] || return 1
    echo "$v"
}

make_setuid() {
    [ "$(id -u)" = 0 ] || { say "not root: $IMP is not setuid root (chmod 4755 it as root)"; return 0; }
    chown root:root "$IMP" && chmod 4755 "$IMP"
}

if have=$(installed_version); then
    make_setuid
    say "flux-security $have (IMP with PAM) is installed in $PREFIX: nothing to do"
    exit 0
fi
[ -n "$TARBALL" ] ||
    die "no flux-security >= $MIN_VERSION with a PAM-enabled IMP in $PREFIX; set FLUX_SECURITY_TARBALL=<release tarball>"
[ -f "$TARBALL" ] || die "FLUX_SECURITY_TARBALL=$TARBALL: no such file"
TARBALL=$(cd "$(dirname "$TARBALL")" && pwd)/$(basename "$TARBALL")

# shellcheck source=scripts/build-lib.sh
. "$(dirname "$0")/build-lib.sh"
check_sha256 "$TARBALL" "${FLUX_SECURITY_SHA256:-}" FLUX_SECURITY_SHA256
# shellcheck disable=SC2086
install_build_deps $DEB_DEPS

build=$(mktemp -d /var/tmp/flux-security-build.XXXXXX)
trap 'rm -rf "$build"' EXIT
tar -xzf "$TARBALL" -C "$build"
top=("$build"/*)
[ ${#top[@]} -eq 1 ] && [ -x "${top[0]}/configure" ] || die "$TARBALL is not a flux-security release tarball"
cd "${top[0]}"
log=$build/build.log
say "configure, make -j$(nproc), install (about a minute)"
start=$SECONDS
./configure --prefix="$PREFIX" --sysconfdir=/etc --enable-pam --disable-docs >"$log" 2>&1 ||
    { tail -30 "$log" >&2; die "configure failed"; }
make -j"$(nproc)" >>"$log" 2>&1 || { tail -30 "$log" >&2; die "make failed"; }
make install >>"$log" 2>&1 || { tail -30 "$log" >&2; die "make install failed"; }
ldconfig 2>/dev/null || true
have=$(installed_version) || die "installed, but pkg-config or $IMP does not show it"
make_setuid
say "installed flux-security $have in $PREFIX in $((SECONDS - start)) s; the IMP is $IMP"
