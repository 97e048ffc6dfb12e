#!/bin/bash
# scripts/setup.sh [--plan] CHECK...: what `make demo` and `make check` run first.
#
# CHECKs are scripts/prereqs.sh's (python, systemd, flux, sharness). When they all pass it does
# nothing. Otherwise, as root on Debian, it installs what is missing, saying what it does and
# how long each step took: `make deps` (Debian and Python packages) when a python, systemd or
# sharness check fails; flux-security then flux-core (configured with it) from release
# tarballs when the flux check fails, each tarball chosen by scripts/tarball.sh
# (FLUX_*_TARBALL, else ../shared/vendor, else the published URL; sha256 checked). Both
# tarballs are found before anything is installed. Not root, or not Debian: it changes
# nothing, prints what is missing and the commands to run, and fails.
#
#   --plan   say what would be done, from which tarballs, and do nothing (no download)
#   SETUP_UID, SETUP_DEBIAN (a file whose presence means Debian, default /etc/debian_version)
#            stand in for `id -u` and the system in tests.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
plan=
[ "${1:-}" != --plan ] || { plan=1; shift; }
say() { echo "setup: $*"; }

failing=()
for check in "$@"; do
    scripts/prereqs.sh "$check" 2>/dev/null || failing+=("$check")
done
[ ${#failing[@]} -gt 0 ] || exit 0

deps= flux=
for check in "${failing[@]}"; do
    case $check in
    flux) flux=1 ;;
    *) deps=1 ;;
    esac
done

uid=${SETUP_UID:-$(id -u)}
if [ "$uid" != 0 ] || [ ! -e "${SETUP_DEBIAN:-/etc/debian_version}" ] || ! command -v apt-get >/dev/null; then
    scripts/prereqs.sh "$@"
    say "nothing was changed: installing these needs root on Debian. Run, as root on Debian:"
    [ -z "$deps" ] || echo "    make deps"
    if [ -n "$flux" ]; then
        for what in flux-security flux-core; do
            src=$(scripts/tarball.sh --dry-run $what 2>/dev/null) && [ -f "$src" ] ||
                src="<$what release tarball: doc/guide/install.md, Prerequisites>"
            var=$(tr a-z- A-Z_ <<<"$what")_TARBALL
            echo "    make $what $var=$src"
        done
    fi
    say "or install them as your system does, then run this again"
    exit 1
fi

steps=()
[ -z "$deps" ] || steps+=("make deps: Debian and Python packages (about a minute)")
if [ -n "$flux" ]; then
    dry=()
    [ -z "$plan" ] || dry=(--dry-run)
    security=$(scripts/tarball.sh "${dry[@]}" flux-security) || exit 1
    core=$(scripts/tarball.sh "${dry[@]}" flux-core) || exit 1
    steps+=("make flux-security from $security (about 10 s to build; nothing if installed)")
    steps+=("make flux-core from $core (2-3 minutes to build on 2 cores)")
fi
say "missing: ${failing[*]}; as root on Debian, installing:"
for step in "${steps[@]}"; do
    echo "    $step"
done
[ -z "$plan" ] || { say "--plan: nothing done"; exit 0; }

start=$SECONDS
run() {  # run WHAT COMMAND...: say how long it took; stop at the first failure
    local t=$SECONDS
    say "== $1"
    shift
    "$@" || { say "failed: $*"; exit 1; }
    say "   took $((SECONDS - t)) s"
}
[ -z "$deps" ] || run "make deps" make --no-print-directory deps
if [ -n "$flux" ]; then
    run "make flux-security" make --no-print-directory flux-security FLUX_SECURITY_TARBALL="$security"
    run "make flux-core" make --no-print-directory flux-core FLUX_CORE_TARBALL="$core"
    hash -r
fi
scripts/prereqs.sh "$@" || { say "still missing after set-up (above)"; exit 1; }
say "set up in $((SECONDS - start)) s"
