# Shared by scripts/flux-security.sh and scripts/flux-core.sh (sourced; they define say and die).

# check_sha256 TARBALL SUM NAME: when SUM is given, TARBALL must match it (NAME: its variable).
check_sha256() {
    [ -n "$2" ] || return 0
    echo "$2  $1" | sha256sum --quiet -c - || die "$1 does not match $3=$2"
    say "sha256 of $(basename "$1") checked"
}

# install_build_deps PACKAGES...: as root with apt-get, install them (apt-get update once if
# that fails); otherwise name them for the user to install.
install_build_deps() {
    if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
        say "installing Debian build dependencies"
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -q --no-install-recommends "$@" >/dev/null ||
            { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "$@" >/dev/null; }
    else
        say "not root with apt-get: make sure these (or your distribution's equivalents) are installed:"
        echo "    $*"
    fi
}
