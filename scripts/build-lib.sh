# Shared by the scripts that build flux-security and flux-core or use flux-core's build tree
# (sourced; check_sha256 and install_build_deps need say and die defined).

# check_sha256 TARBALL SUM NAME: when SUM is given, TARBALL must match it (NAME: its variable).
check_sha256() {
    [ -n "$2" ] || return 0
    echo "$2  $1" | sha256sum --quiet -c - || die "$1 does not match $3=$2"
    say "sha256 of $(basename "$1") checked"
}

# install_build_deps PACKAGES...: as root with apt-get, install them (when that fails, as it
# does where apt has no package lists yet, a new build root's, apt-get update and again: only
# that second try's errors are shown); otherwise name them for the user to install.
install_build_deps() {
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        say "installing Debian build dependencies"
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -q --no-install-recommends "$@" >/dev/null 2>&1 || {
            say "apt-get install failed: apt-get update, then again"
            apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "$@" >/dev/null
        }
    else
        say "not root with apt-get: make sure these (or your distribution's equivalents) are installed:"
        echo "    $*"
    fi
}

# flux-core's build tree, which `make flux-core` keeps and check-upstream and the v2 tier run
# flux-core's tests from. SDEXEC_BUILDS (default /var/tmp/flux-sdexec) is where it keeps them.
flux_core_builds=${SDEXEC_BUILDS:-/var/tmp/flux-sdexec}

# flux_core_build: the tree to use: FLUX_CORE_BUILD when set (built or not), else the newest
# one make flux-core finished under SDEXEC_BUILDS; nothing when there is none.
flux_core_build() {
    local stamp
    if [ -n "${FLUX_CORE_BUILD:-}" ]; then
        echo "$FLUX_CORE_BUILD"
        return
    fi
    # shellcheck disable=SC2012
    stamp=$(ls -td "$flux_core_builds"/*/.flux-sdexec-built 2>/dev/null | head -1) || true
    echo "${stamp%/.flux-sdexec-built}"
}

# flux_core_build_for TARBALL: where make flux-core builds TARBALL (FLUX_CORE_BUILD when set).
flux_core_build_for() {
    echo "${FLUX_CORE_BUILD:-$flux_core_builds/$(basename "$1" .tar.gz)}"
}

# flux_core_built DIR: make flux-core finished building DIR (it writes the stamp last).
flux_core_built() {
    [ -n "$1" ] && [ -f "$1/.flux-sdexec-built" ]
}

# flux_core_no_build: why there is no tree to use, for a message.
flux_core_no_build() {
    if [ -n "${FLUX_CORE_BUILD:-}" ]; then
        echo "no flux-core build tree at FLUX_CORE_BUILD=$FLUX_CORE_BUILD"
    else
        echo "no flux-core build tree in $flux_core_builds"
    fi
}
