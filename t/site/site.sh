#!/bin/sh
# flux-sdexec site harness: a Flux system instance as a site runs it, on this machine.
#
# Usage (root): t/site/site.sh up|down|status
#   up      users flux, fluxguest1 and fluxguest2; munged with the harness's key; the IMP
#           setuid root and configured; the flux user's systemd manager (non-root, own cgroup
#           subtree, runtime dir and session bus); the system instance `sys` owned by flux
#           (SITE_SIZE=2 brokers, config in /etc/flux/system/conf.d loading this checkout's
#           modules). Its last line says how to reach it.
#   down    stops all of that, each process by the pid the harness recorded: no process, unit,
#           cgroup or runtime dir is left. Users, the IMP and the config files stay.
#   status  what runs, by pidfile.
# Environment: see t/site/lib.sh (SITE_USER, SITE_GUESTS, SITE_CONF, SITE_SIZE, ...).
set -u
SITE_SRCDIR=$(cd "$(dirname "$0")/../.." && pwd)
. "$SITE_SRCDIR/t/site/lib.sh"
. "$SITE_SRCDIR/t/site/security.sh"
. "$SITE_SRCDIR/t/site/manager.sh"
. "$SITE_SRCDIR/t/site/instance.sh"

# site_cannot_run: why this machine cannot run the site, or nothing.
site_cannot_run() {
    [ "$(id -u)" = 0 ] || { echo "not root (the harness adds users and installs the IMP setuid)"; return; }
    command -v flux >/dev/null || { echo "flux-core is not installed (no flux on PATH)"; return; }
    flux version | grep -q '^libflux-security' ||
        { echo "flux-core is not built --with-flux-security (make flux-security flux-core)"; return; }
    [ -x "$(site_libexec flux-imp)" ] || { echo "no IMP at $(site_libexec flux-imp)"; return; }
    command -v munged >/dev/null || { echo "munge is not installed (apt-get install munge)"; return; }
    [ -d /sys/fs/cgroup/unified ] || [ -f /sys/fs/cgroup/cgroup.controllers ] ||
        { echo "no cgroup2 hierarchy"; return; }
    [ -f /sys/fs/cgroup/cgroup.controllers ] && { echo "unified-only cgroup layout: not supported by this harness yet"; return; }
    [ -d /sys/fs/cgroup/systemd ] || { echo "no name=systemd hierarchy"; return; }
    setpriv --reuid=65534 --regid=65534 --clear-groups \
        test -r "$SITE_SRCDIR/flux_sdexec/modules/sdexec.py" 2>/dev/null || {
        echo "this checkout ($SITE_SRCDIR) cannot be read by other users, and the flux user loads its modules: clone it where others can read it (a directory above it is private, as mktemp -d makes)"
        return
    }
}

site_up() {
    _why=$(site_cannot_run)
    [ -z "$_why" ] || site_die "cannot run here: $_why"
    install -d -m 0755 "$SITE_STATE" || exit 1
    site_say "users";    users_up || site_die "could not create the users"
    guest_job_tmpdirs_down
    site_say "munge";    munge_up || site_die "could not start munged"
    site_say "IMP";      imp_up || site_die "could not install the IMP"
    site_say "manager";  manager_up || site_die "could not start the $SITE_USER manager"
    site_say "instance"; instance_config || site_die "could not write $SITE_CONF"
    instance_up || site_die "could not start the instance"
    site_env >"$SITE_STATE/env"
    echo "site up: FLUX_URI=$(site_uri) (rank 0; rank 1: $(site_uri 1)) for $SITE_USER and" \
        "the guests $SITE_GUESTS; as root: . $SITE_STATE/env; as_user USER flux ..."
}

site_down() {
    [ "$(id -u)" = 0 ] || site_die "not root"
    [ -d "$SITE_STATE" ] || { site_say "not up"; return 0; }
    site_say "instance"; instance_down
    site_say "manager";  manager_down
    site_say "munge";    munge_down
    guest_job_tmpdirs_down
    rm -rf "$SITE_STATE"
    site_say "down"
}

# site_env: what a shell sources to reach the site (used by the site tests).
site_env() {
    for _v in SITE_USER SITE_GUESTS SITE_GUEST_GROUP SITE_STATE SITE_CONF SITE_IMP_CONF \
        SITE_RUNDIR SITE_SIZE SITE_SLICE SITE_SRCDIR; do
        eval "printf '%s=\"%s\"\n' $_v \"\$$_v\""
    done
    echo ". \"$SITE_SRCDIR/t/site/lib.sh\""
}

site_status() {
    for _n in munged manager instance $(seq -f 'broker-%g' 0 $((SITE_SIZE - 1))); do
        echo "$_n: $(site_pid $_n || echo -)"
    done
}

case ${1:-} in
up) site_up ;;
down) site_down ;;
status) site_status ;;
why-not) site_cannot_run ;;
*) site_die "usage: $0 up|down|status|why-not" ;;
esac
