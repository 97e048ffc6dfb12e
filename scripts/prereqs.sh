#!/bin/bash
# Check what a make target needs and name the command that provides what is missing.
#
# Usage: scripts/prereqs.sh python|systemd|flux|flux-tree|sharness|vm ...
#   python    the tests' PYTHON imports pystemd, pytest and cffi, and flux's interpreter
#             (FLUX_PYTHON, default what `flux python` runs), which runs our module, pystemd and cffi
#   systemd   the binaries t/start-user-systemd.sh starts (systemd --user, dbus-daemon)
#   flux      flux-core >= 0.88 with systemd support on PATH, its interpreter one every user can run
#   flux-tree flux-core's build tree, which check-upstream and the v2 tier run flux-core's tests
#             from (FLUX_CORE_BUILD, else the newest make flux-core kept; scripts/build-lib.sh)
#   sharness  Debian's sharness library and prove
#   vm        qemu, qemu-img, mmdebstrap and file, which build and boot the v2 guest (make vm)
# Exits 1 after listing every missing piece; prints nothing when all is there.
set -u
# shellcheck source=scripts/build-lib.sh
. "$(dirname "$0")/build-lib.sh"
FLUX_PYTHON=${FLUX_PYTHON:-$(flux python -c 'import sys; print(sys.executable)' 2>/dev/null ||
    echo /usr/bin/python3)}
PYTHON=${PYTHON:-$FLUX_PYTHON}
missing=0
need() {
    echo "missing: $1" >&2
    echo "    fix: $2" >&2
    missing=1
}
# need_module PY MOD: PY imports MOD, else name the package that provides it
need_module() {
    "$1" -c "import $2" 2>/dev/null && return
    case $1 in
    /usr/bin/*) need "Python package $2 for $1" "make deps (or: apt-get install python3-$2)" ;;
    *) need "Python package $2 for $1" "$1 -m pip install $2" ;;
    esac
}
# world_runnable PATH: every user can reach and run PATH (no mode-700 home on the way)
others_x() { (( 0$(stat -c %a "$1") & 1 )); }
world_runnable() {
    local p
    p=$(readlink -f "$1") || return 1
    others_x "$p" || return 1
    while p=$(dirname "$p") && [ "$p" != / ]; do
        others_x "$p" || return 1
    done
}

for what in "$@"; do
    case $what in
    python)
        for mod in pystemd pytest cffi; do
            need_module "$PYTHON" $mod
        done
        if [ "$(readlink -f "$FLUX_PYTHON")" != "$(readlink -f "$PYTHON")" ]; then
            for mod in pystemd cffi; do
                need_module "$FLUX_PYTHON" $mod
            done
        fi
        ;;
    systemd)
        [ -x /lib/systemd/systemd ] && command -v dbus-daemon >/dev/null ||
            need "systemd and dbus (systemd --user, dbus-daemon)" \
                "make deps (or: apt-get install systemd dbus dbus-user-session)"
        ;;
    flux)
        if ! command -v flux >/dev/null; then
            need "flux-core (flux not on PATH)" \
                "make flux-core FLUX_CORE_TARBALL=<flux-core release tarball>  (see doc/guide/install.md)"
        elif ! flux version 2>/dev/null | grep -q '+systemd'; then
            need "flux-core built with systemd support ($(command -v flux) lacks +systemd)" \
                "make flux-core FLUX_CORE_TARBALL=<flux-core release tarball>  (see doc/guide/install.md)"
        elif ! py=$(flux python -c 'import sys; print(sys.executable)' 2>/dev/null); then
            need "flux's Python (flux python fails)" \
                "make flux-core FLUX_CORE_TARBALL=<flux-core release tarball>  (see doc/guide/install.md)"
        elif ! world_runnable "$py"; then
            need "flux-core built with a Python every user can run ($py is not)" \
                "make flux-core FLUX_CORE_TARBALL=<tarball>  (rebuilds it on /usr/bin/python3)"
        fi
        ;;
    flux-tree)
        flux_core_built "$(flux_core_build)" ||
            need "$(flux_core_no_build) (check-upstream and the v2 tier run flux-core's tests from it)" \
                "make flux-core  (builds the tree from the release tarball; an installed flux-core is kept)"
        ;;
    sharness)
        [ -f /usr/share/sharness/sharness.sh ] && command -v prove >/dev/null ||
            need "Debian's sharness and prove" "make deps (or: apt-get install sharness perl)"
        ;;
    vm)
        for cmd in qemu-system-x86_64 qemu-img mmdebstrap file; do
            command -v $cmd >/dev/null ||
                need "$cmd (the v2 guest)" "make deps (or: apt-get install qemu-system-x86 qemu-utils mmdebstrap file)"
        done
        ;;
    *)
        echo "prereqs.sh: unknown check $what" >&2
        exit 2
        ;;
    esac
done
exit $missing
