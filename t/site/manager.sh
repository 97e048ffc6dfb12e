# flux-sdexec site harness: the flux user's systemd manager, non-root, started as
# user@.service starts it (sourced by t/site/site.sh after lib.sh).
#
# What user@.service with Delegate=yes gives the manager, done by hand: its own
# /run/user/<uid> (mode 0700), a cgroup <slice>/user-<uid>.slice/user@<uid>.service in the
# name=systemd and the unified hierarchy chowned to the user, the manager started in it as
# the user with a clean environment. The session bus is the manager's own dbus.socket unit
# (Debian's dbus-user-session), so it stops with the manager.

site_manager_answers() {
    [ "$(as_user "$SITE_USER" timeout 5 systemctl --user is-system-running 2>/dev/null)" = running ] &&
        as_user "$SITE_USER" timeout 5 busctl --user call org.freedesktop.systemd1 \
            /org/freedesktop/systemd1 org.freedesktop.DBus.Peer Ping >/dev/null 2>&1
}

manager_up() {
    if site_pid manager >/dev/null; then
        site_manager_answers && return 0
        site_die "the $SITE_USER manager (pid $(site_pid manager)) does not answer"
    fi
    [ -d /run/systemd/system ] || mkdir -p /run/systemd/system || return 1  # sd_booted()
    _uid=$(site_uid "$SITE_USER")
    _rt=$(site_runtime_dir)
    install -d -o "$SITE_USER" -g "$(id -g "$SITE_USER")" -m 0700 "$_rt" || return 1
    for _h in systemd unified; do
        _cg=$(site_cgroup $_h)
        mkdir -p "$_cg" && chown -R "$SITE_USER:" "$_cg" || return 1
    done
    _sd=/lib/systemd/systemd
    [ -x $_sd ] || _sd=/usr/lib/systemd/systemd
    # The child enters both cgroups as root (moving a process needs write access to the
    # common ancestor's cgroup.procs), then becomes the user and execs the manager: its pid
    # is the manager's.
    setsid sh -c 'echo $$ >"$1/cgroup.procs" && echo $$ >"$2/cgroup.procs" && shift 2 &&
        exec "$@"' site-manager "$(site_cgroup systemd)" "$(site_cgroup unified)" \
        setpriv --reuid="$_uid" --regid="$(id -g "$SITE_USER")" --init-groups \
        env -i -C "$(site_home "$SITE_USER")" HOME="$(site_home "$SITE_USER")" \
        USER="$SITE_USER" LOGNAME="$SITE_USER" PATH="$SITE_PATH" LANG=C.UTF-8 \
        XDG_RUNTIME_DIR="$_rt" DBUS_SESSION_BUS_ADDRESS="unix:path=$_rt/bus" \
        $_sd --user </dev/null >>"$SITE_STATE/manager.log" 2>&1 &
    site_record manager $!
    site_wait_until "$SITE_TIMEOUT" site_manager_answers || {
        tail -n 20 "$SITE_STATE/manager.log" >&2
        site_die "the $SITE_USER manager did not answer within $SITE_TIMEOUT s"
    }
}

# manager_down: ask the manager to exit (its units stop), then its pid; SIGKILL any process
# still in its cgroup subtree (each found by pid there: none is expected), remove the subtree
# depth first in both hierarchies, then the runtime dir.
manager_down() {
    if site_pid manager >/dev/null; then
        as_user "$SITE_USER" timeout 10 systemctl --user exit 2>/dev/null
        site_wait_until 30 site_pid_gone "$(site_pid manager)" || true
    fi
    site_stop_pid manager
    for _h in systemd unified; do
        _cg=$(site_cgroup $_h)
        [ -d "$_cg" ] || continue
        _left=$(find "$_cg" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u)
        if [ -n "$_left" ]; then
            site_say "processes left in $_cg: $(echo $_left) (SIGKILL)"
            for _p in $_left; do kill -KILL "$_p" 2>/dev/null; done
        fi
        site_wait_until 10 site_cgroup_empty "$_cg" || site_say "$_cg still has processes"
        find "$_cg" -depth -type d -exec rmdir {} \; 2>/dev/null
        _parent=$(dirname "$_cg")
        rmdir "$_parent" "$(dirname "$_parent")" 2>/dev/null
        [ ! -d "$_cg" ] || site_say "could not remove $_cg"
    done
    rm -rf "$(site_runtime_dir)"
}

site_cgroup_empty() {
    [ -z "$(find "$1" -name cgroup.procs -exec cat {} + 2>/dev/null)" ]
}
