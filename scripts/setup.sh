#!/bin/bash
# scripts/setup.sh [--plan] CHECK...: what `make demo` and `make check` run first.
#
# CHECKs are scripts/prereqs.sh's (python, systemd, flux, flux-tree, sharness). When they all
# pass it does nothing. Otherwise, as root on Debian, it installs what is missing, saying what
# it does and how long each step took: `make deps` (Debian and Python packages) when a python,
# systemd or sharness check fails; flux-security then flux-core (configured with it) from
# release tarballs when the flux check fails, each tarball chosen by scripts/tarball.sh
# (FLUX_*_TARBALL, else ../shared/vendor, else the published URL; sha256 checked); only
# flux-core's build tree (`make flux-core`, which then installs nothing) when only the
# flux-tree check fails. Both tarballs are found before anything is installed. Not root, or
# not Debian: it changes nothing, prints what is missing and the commands to run (one line
# when only the build tree is missing), and fails.
#
#   --plan   say what would be done, from which tarballs, and do nothing (no download)
#   SETUP_UID, SETUP_DEBIAN (a file whose presence means Debian, default /etc/debian_version)
#            stand in for `id -u` and the system in tests.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=scripts/build-lib.sh
. scripts/build-lib.sh
plan=
[ "${1:-}" != --plan ] || { plan=1; shift; }
say() { echo "setup: $*"; }

failing=()
for check in "$@"; do
    scripts/prereqs.sh "$check" 2>/dev/null || failing+=("$check")
done
[ ${#failing[@]} -gt 0 ] || exit 0

deps= flux= tree=
for check in "${failing[@]}"; do
    case $check in
    flux) flux=1 ;;
    flux-tree) tree=1 ;;
    *) deps=1 ;;
    esac
done

uid=${SETUP_UID:-$(id -u)}
make_command() {  # make_command flux-security|flux-core: the make command that installs it
    local src var build=
    src=$(scripts/tarball.sh --dry-run "$1" 2>/dev/null) && [ -f "$src" ] ||
        src="<$1 release tarball: doc/guide/install.md, Prerequisites>"
    var=$(tr a-z- A-Z_ <<<"$1")_TARBALL
    [ "$1" != flux-core ] || build=${FLUX_CORE_BUILD:+ FLUX_CORE_BUILD=$FLUX_CORE_BUILD}
    echo "make $1 $var=$src$build"
}
if [ "$uid" != 0 ] || [ ! -e "${SETUP_DEBIAN:-/etc/debian_version}" ] || ! command -v apt-get >/dev/null; then
    if [ -z "$deps$flux" ]; then
        say "$(flux_core_no_build), which check-upstream and the v2 tier run flux-core's tests" \
            "from; nothing was changed. Run, as root on Debian: $(make_command flux-core)"
        exit 1
    fi
    scripts/prereqs.sh "$@"
    say "nothing was changed: installing these needs root on Debian. Run, as root on Debian:"
    [ -z "$deps" ] || echo "    make deps"
    if [ -n "$flux" ]; then
        echo "    $(make_command flux-security)"
        echo "    $(make_command flux-core)"
    elif [ -n "$tree" ]; then
        echo "    $(make_command flux-core)"
    fi
    say "or install them as your system does, then run this again"
    exit 1
fi

steps=()
[ -z "$deps" ] || steps+=("make deps: Debian and Python packages (about a minute)")
dry=()
[ -z "$plan" ] || dry=(--dry-run)
if [ -n "$flux" ]; then
    security=$(scripts/tarball.sh "${dry[@]}" flux-security) || exit 1
    core=$(scripts/tarball.sh "${dry[@]}" flux-core) || exit 1
    steps+=("make flux-security from $security (about 10 s to build; nothing if installed)")
    steps+=("make flux-core from $core (2-3 minutes to build on 2 cores)")
elif [ -n "$tree" ]; then
    core=$(scripts/tarball.sh "${dry[@]}" flux-core) ||
        { say "$(flux_core_no_build), and no flux-core tarball to build one (above)"; exit 1; }
    steps+=("make flux-core from $core: only its build tree, into $(flux_core_build_for "$core")
        (2-3 minutes to build on 2 cores; the installed flux-core is kept)")
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
elif [ -n "$tree" ]; then
    run "make flux-core (its build tree)" make --no-print-directory flux-core FLUX_CORE_TARBALL="$core"
fi
scripts/prereqs.sh "$@" || { say "still missing after set-up (above)"; exit 1; }
say "set up in $((SECONDS - start)) s"
