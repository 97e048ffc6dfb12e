# flux-sdexec site harness: names, paths and helpers shared by t/site/*.sh and the site tests.
# Sourced (POSIX sh). Every process the harness starts has its pid in $SITE_STATE/*.pid.

SITE_USER=${SITE_USER:-flux}
SITE_GUESTS=${SITE_GUESTS:-"fluxguest1 fluxguest2"}
SITE_GUEST_GROUP=${SITE_GUEST_GROUP:-fluxsite}  # a supplementary group of the first guest
SITE_STATE=${SITE_STATE:-/run/sdexec-site}      # pidfiles, logs, env (root's)
SITE_CONF=${SITE_CONF:-/etc/flux/system/conf.d} # the system instance's config, as in production
SITE_IMP_CONF=${SITE_IMP_CONF:-/etc/flux/imp/conf.d}
SITE_SIGN_CONF=${SITE_SIGN_CONF:-/etc/flux/security/conf.d}
SITE_RUNDIR=${SITE_RUNDIR:-/run/flux}             # flux.service's RuntimeDirectory
SITE_SIZE=${SITE_SIZE:-2}
SITE_SLICE=${SITE_SLICE:-user.slice}              # where user@.service lives in production
SITE_TIMEOUT=${SITE_TIMEOUT:-60}
SITE_PATH=/usr/local/bin:/usr/bin:/bin
SITE_SRCDIR=${SITE_SRCDIR:-$(cd "$(dirname "$0")/../.." 2>/dev/null && pwd)}

site_die() {
    echo "site: $*" >&2
    exit 1
}
site_say() {
    echo "site: $*" >&2
}

# site_libexec NAME: flux-core's installed path of a program (flux-shell, flux-imp).
site_libexec() {
    case $1 in
    flux-shell) flux config builtin --installed shell_path ;;
    flux-imp) echo "$(dirname "$(flux config builtin --installed shell_path)")/flux-imp" ;;
    esac
}

site_uid() {
    id -u "$1"
}
site_home() {
    getent passwd "$1" | cut -d: -f6
}
# The flux user's systemd manager: its runtime dir and its cgroup in a hierarchy (systemd|unified).
site_runtime_dir() {
    echo "/run/user/$(site_uid "$SITE_USER")"
}
site_cgroup() {
    _u=$(site_uid "$SITE_USER")
    echo "/sys/fs/cgroup/$1/$SITE_SLICE/user-$_u.slice/user@$_u.service"
}
site_uri() {  # site_uri [RANK]
    echo "local://$SITE_RUNDIR/local-${1:-0}"
}

# as_user USER [VAR=VALUE...] CMD...: run CMD as USER (uid, gid, supplementary groups), in the
# user's home, with a clean environment as a login would give it plus FLUX_URI of rank 0; the
# flux user also gets its manager's runtime dir and session bus. as_user_exec execs it.
as_user() {
    (as_user_exec "$@")
}
as_user_exec() {
    _as=$1
    shift
    _home=$(site_home "$_as")
    set -- HOME="$_home" USER="$_as" LOGNAME="$_as" PATH="$SITE_PATH" LANG=C.UTF-8 \
        FLUX_URI="$(site_uri)" FLUX_EXEC_PATH_PREPEND="$SITE_SRCDIR/cmd" "$@"
    if [ "$_as" = "$SITE_USER" ]; then
        _rt=$(site_runtime_dir)
        set -- XDG_RUNTIME_DIR="$_rt" DBUS_SESSION_BUS_ADDRESS="unix:path=$_rt/bus" "$@"
    fi
    exec setpriv --reuid="$(site_uid "$_as")" --regid="$(id -g "$_as")" --init-groups \
        env -i -C "$_home" "$@"
}

# site_record NAME PID: write NAME.pid: the pid and its start time, so that a pid reused by
# another process later is never taken for it. site_pid NAME: that pid while it lives.
site_record() {
    echo "$2 $(site_starttime "$2")" >"$SITE_STATE/$1.pid"
}
site_starttime() {
    sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f20
}
site_pid() {
    [ -s "$SITE_STATE/$1.pid" ] || return 1
    read -r _p _t <"$SITE_STATE/$1.pid"
    [ -n "$_t" ] && [ "$(site_starttime "$_p")" = "$_t" ] && echo "$_p"
}

# site_stop_pid NAME [SECONDS]: SIGTERM the pid of NAME.pid, SIGKILL it after SECONDS (10),
# wait for it to be gone, remove the pidfile. Only that pid is signalled.
site_stop_pid() {
    _p=$(site_pid "$1") || {
        rm -f "$SITE_STATE/$1.pid"
        return 0
    }
    kill -TERM "$_p" 2>/dev/null
    if ! site_wait_until "${2:-10}" site_pid_gone "$_p"; then
        site_say "$1 (pid $_p) ignored SIGTERM: SIGKILL"
        kill -KILL "$_p" 2>/dev/null
        site_wait_until 10 site_pid_gone "$_p" || site_say "$1 (pid $_p) did not exit"
    fi
    rm -f "$SITE_STATE/$1.pid"
}
site_pid_gone() {
    ! kill -0 "$1" 2>/dev/null || grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null
}

# site_wait_until SECONDS CMD...: run CMD every 0.2 s until it succeeds, for at most SECONDS.
site_wait_until() {
    _deadline=$(($(date +%s) + $1))
    shift
    until "$@"; do
        [ "$(date +%s)" -lt $_deadline ] || return 1
        sleep 0.2
    done
}
