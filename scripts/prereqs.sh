#!/bin/bash
# Check what a make target needs and name the command that provides what is missing.
#
# Usage: scripts/prereqs.sh python|systemd|flux|sharness ...
#   python    PYTHON (default python3) imports pystemd, pytest and cffi
#   systemd   the binaries t/start-user-systemd.sh starts (systemd --user, dbus-daemon)
#   flux      flux-core >= 0.88 with systemd support on PATH
#   sharness  Debian's sharness library and prove
# Exits 1 after listing every missing piece; prints nothing when all is there.
set -u
PYTHON=${PYTHON:-python3}
missing=0
need() {
    echo "missing: $1" >&2
    echo "    fix: $2" >&2
    missing=1
}

for what in "$@"; do
    case $what in
    python)
        for mod in pystemd pytest cffi; do
            "$PYTHON" -c "import $mod" 2>/dev/null ||
                need "Python package $mod for $PYTHON" "make deps (or: $PYTHON -m pip install $mod)"
        done
        ;;
    systemd)
        [ -x /lib/systemd/systemd ] && command -v dbus-daemon >/dev/null ||
            need "systemd and dbus (systemd --user, dbus-daemon)" \
                "make deps (or: apt-get install systemd dbus dbus-user-session)"
        ;;
    flux)
        if ! command -v flux >/dev/null; then
            need "flux-core (flux not on PATH)" \
                "make flux-core FLUX_CORE_TARBALL=<flux-core release tarball>  (see README)"
        elif ! flux version 2>/dev/null | grep -q '+systemd'; then
            need "flux-core built with systemd support ($(command -v flux) lacks +systemd)" \
                "make flux-core FLUX_CORE_TARBALL=<flux-core release tarball>  (see README)"
        fi
        ;;
    sharness)
        [ -f /usr/share/sharness/sharness.sh ] && command -v prove >/dev/null ||
            need "Debian's sharness and prove" "make deps (or: apt-get install sharness perl)"
        ;;
    *)
        echo "prereqs.sh: unknown check $what" >&2
        exit 2
        ;;
    esac
done
exit $missing
