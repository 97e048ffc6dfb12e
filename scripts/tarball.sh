#!/bin/bash
# scripts/tarball.sh [--dry-run] flux-security|flux-core: print the path of the release tarball to build,
# chosen in this order, and say on stderr which and why:
#
#   1. FLUX_SECURITY_TARBALL / FLUX_CORE_TARBALL, when given (sha256 checked against
#      FLUX_*_SHA256 when that is given);
#   2. the pinned tarball in the vendor directory (SDEXEC_VENDOR, default ../shared/vendor
#      beside the checkout), when present, checked against the pinned sha256;
#   3. a download of the published URL (FLUX_*_URL overrides it, e.g. a file:// URL or a
#      mirror) into SDEXEC_DOWNLOADS (default /var/tmp/flux-sdexec/downloads), checked against
#      the pinned sha256 (FLUX_*_SHA256 overrides it); a mismatch deletes it and fails.
#
# Downloads nothing when a download with the right sha256 is already there, or with --dry-run
# (which prints where the download would go). Exits 1, saying
# why, when there is no source or a sha256 does not match.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
dry=
[ "${1:-}" != --dry-run ] || { dry=1; shift; }
what=${1:-}
say() { echo "$what: $*" >&2; }
die() { echo "$what: $*" >&2; exit 1; }

# The versions this project is tested against. flux-security's is its published release
# (the sha256 is that of the copy in ../shared/vendor: no network here to compare).
# flux-core's is v0.88.0 plus the 59 commits that add bgexec over sdexec (job-exec's
# `method = "bgexec"`, sdexec's wait and kill by label), which no release carries yet: the
# v0.88.0 release tarball (flux-core-0.88.0.tar.gz) predates them, so there is no published
# URL to fall back on until the next release; FLUX_CORE_URL names one when there is.
case $what in
flux-security)
    name=flux-security-0.15.0.tar.gz
    url=${FLUX_SECURITY_URL:-https://github.com/flux-framework/flux-security/releases/download/v0.15.0/$name}
    pinned=15b2328fc15a48c90e8dfbcc6b4b56b4f1a5a2a9a4258de01ce006d26487879a
    given=${FLUX_SECURITY_TARBALL:-} sum=${FLUX_SECURITY_SHA256:-} var=FLUX_SECURITY
    ;;
flux-core)
    name=flux-core-0.88.0-59-g4a5e79f56.tar.gz
    url=${FLUX_CORE_URL:-}
    pinned=48e94dd579abfa0d35ffacb0713961a27edd60f7eb71c08f89e6fb53e8ab715f
    given=${FLUX_CORE_TARBALL:-} sum=${FLUX_CORE_SHA256:-} var=FLUX_CORE
    ;;
*)
    echo "usage: scripts/tarball.sh [--dry-run] flux-security|flux-core" >&2
    exit 2
    ;;
esac
vendor=${SDEXEC_VENDOR:-$(dirname "$top")/shared/vendor}
downloads=${SDEXEC_DOWNLOADS:-/var/tmp/flux-sdexec/downloads}

matches() {  # matches FILE SHA256
    [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]
}

if [ -n "$given" ]; then
    [ -f "$given" ] || die "${var}_TARBALL=$given: no such file"
    if [ -n "$sum" ]; then
        matches "$given" "$sum" || die "$given does not match ${var}_SHA256=$sum: refused"
        say "using ${var}_TARBALL=$given (sha256 checked)"
    else
        say "using ${var}_TARBALL=$given (no ${var}_SHA256 given: not checked)"
    fi
    echo "$given"
    exit 0
fi
sum=${sum:-$pinned}
if [ -f "$vendor/$name" ]; then
    matches "$vendor/$name" "$sum" || die "$vendor/$name does not match sha256 $sum: refused"
    say "using $vendor/$name (sha256 checked)"
    echo "$vendor/$name"
    exit 0
fi
[ -n "$url" ] || die "no ${var}_TARBALL, no $vendor/$name, and $name has no published URL
    (flux-core v0.88.0's release predates bgexec); set ${var}_TARBALL=<tarball> or ${var}_URL=<url>"
file="$downloads/$(basename "$url")"
if [ -f "$file" ] && matches "$file" "$sum"; then
    say "using $file, downloaded before (sha256 checked)"
    echo "$file"
    exit 0
fi
if [ -n "$dry" ]; then
    say "would download $url (sha256 $sum)"
    echo "$file"
    exit 0
fi
mkdir -p "$downloads"
say "downloading $url"
start=$SECONDS
curl -fsSL --retry 2 -o "$file.part" "$url" || { rm -f "$file.part"; die "cannot download $url"; }
if ! matches "$file.part" "$sum"; then
    rm -f "$file.part"
    die "$url does not match sha256 $sum: refused (deleted)"
fi
mv "$file.part" "$file"
say "downloaded $file in $((SECONDS - start)) s (sha256 checked)"
echo "$file"
