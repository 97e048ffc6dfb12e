#!/bin/sh
# Make sure a systemd user instance and its session D-Bus run for the current user.
#
# Usage: eval "$(t/start-user-systemd.sh)"
#
# Prints only "export XDG_RUNTIME_DIR=..." and "export DBUS_SESSION_BUS_ADDRESS=..." on
# stdout; diagnostics go to stderr. Does nothing but print when the instance already answers.
# Exits non-zero, saying why, when it cannot start one within START_TIMEOUT seconds (30).
#
# Quirks found in the test container (no systemd as pid 1, cgroup v1 hybrid, systemd 252):
# - systemd --user refuses to start unless /run/systemd/system exists (that is sd_booted()).
# - Debian's dbus-user-session ships a user dbus.socket that binds $XDG_RUNTIME_DIR/bus itself,
#   unlinking any socket already there: a dbus-daemon we started first would be orphaned. So we
#   start our own dbus-daemon only when no user dbus.socket unit is installed.
# - systemd --user sees itself at cgroup "/" and moves every process of the root cgroup (pid 1
#   included) into /init.scope. Harmless here; transient units land in /app.slice/<unit>.
# - Delegate=yes works (the unit gets its own cgroup v2 directory under /sys/fs/cgroup/unified),
#   and `systemd-run --user --wait true` succeeds.
# - pid 1 does not reap orphans promptly, so a killed dbus-daemon may linger as a zombie.
# - The manager starts with a clean environment (env -i) so units do not inherit the caller's.
# - Nothing started here may keep the caller's stdout open: `eval "$(...)"` waits for EOF on it.
#   So the manager is exec'd straight from the background job (no shell left waiting on it).

set -u

uid=$(id -u)
XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/run/user/$uid}
DBUS_SESSION_BUS_ADDRESS=${DBUS_SESSION_BUS_ADDRESS:-unix:path=$XDG_RUNTIME_DIR/bus}
export XDG_RUNTIME_DIR DBUS_SESSION_BUS_ADDRESS
timeout=${START_TIMEOUT:-30}
log=$XDG_RUNTIME_DIR/start-user-systemd.log

die() {
    echo "start-user-systemd: $*" >&2
    exit 1
}

# The manager answers on its private socket, and pystemd reaches it over the session bus.
# Each probe is bounded: against a half-dead bus a client would otherwise wait 25 s.
manager_up() {
    [ -n "$(timeout 5 systemctl --user is-system-running 2>/dev/null)" ]
}
bus_up() {
    timeout 5 busctl --user call org.freedesktop.systemd1 /org/freedesktop/systemd1 \
        org.freedesktop.DBus.Peer Ping >/dev/null 2>&1
}
# A manager process of this uid that may not answer yet (SIGSTOPped by a fault test, in a
# daemon-reexec, still starting): wait for it. Starting a second one would take over the
# private socket and the bus name while the first keeps its units: two managers, each
# knowing half of them. Found by pid, never signalled here.
manager_pid() {
    pgrep -u "$uid" -f '^(/usr)?/lib/systemd/systemd --user' | head -1
}
print_exports() {
    printf "export XDG_RUNTIME_DIR='%s'\n" "$XDG_RUNTIME_DIR"
    printf "export DBUS_SESSION_BUS_ADDRESS='%s'\n" "$DBUS_SESSION_BUS_ADDRESS"
}

if manager_up && bus_up; then
    print_exports
    exit 0
fi

mkdir -p /run/systemd/system 2>/dev/null || die "cannot create /run/systemd/system (need root)"
if [ ! -d "$XDG_RUNTIME_DIR" ]; then
    mkdir -p "$XDG_RUNTIME_DIR" && chmod 0700 "$XDG_RUNTIME_DIR" ||
        die "cannot create $XDG_RUNTIME_DIR"
fi
[ -O "$XDG_RUNTIME_DIR" ] || die "$XDG_RUNTIME_DIR is not owned by uid $uid"

sd=
for f in /lib/systemd/systemd /usr/lib/systemd/systemd; do
    [ -x "$f" ] && sd=$f && break
done
[ -n "$sd" ] || die "systemd binary not found"

# exec'd, so that a background start leaves no shell behind holding the caller's descriptors.
exec_cleanenv() {
    exec env -i PATH="$PATH" HOME="${HOME:-/}" USER="$(id -un)" LOGNAME="$(id -un)" \
        LANG="${LANG:-C.UTF-8}" XDG_RUNTIME_DIR="$XDG_RUNTIME_DIR" \
        DBUS_SESSION_BUS_ADDRESS="$DBUS_SESSION_BUS_ADDRESS" "$@"
}

have_dbus_socket=no
for d in /etc/systemd/user /usr/lib/systemd/user /lib/systemd/user; do
    [ -e "$d/dbus.socket" ] && have_dbus_socket=yes && break
done
if [ $have_dbus_socket = no ] && [ -z "$(manager_pid)" ] && ! manager_up; then
    echo "start-user-systemd: starting dbus-daemon on $DBUS_SESSION_BUS_ADDRESS" >&2
    (exec_cleanenv dbus-daemon --session --address="$DBUS_SESSION_BUS_ADDRESS" --fork \
        --nopidfile --syslog-only) </dev/null >>"$log" 2>&1 || die "dbus-daemon failed, see $log"
fi

pid=$(manager_pid)
if [ -n "$pid" ]; then
    echo "start-user-systemd: systemd --user (pid $pid) runs but does not answer yet: waiting" >&2
elif ! manager_up; then
    echo "start-user-systemd: starting $sd --user (log: $log)" >&2
    (exec_cleanenv setsid "$sd" --user) </dev/null >>"$log" 2>&1 &
    pid=$!
fi

# Bounded by the clock, not by a count of probes (a probe may itself take seconds).
deadline=$(($(date +%s) + timeout))
while ! { manager_up && bus_up; }; do
    if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
        tail -n 20 "$log" >&2
        die "systemd --user exited during startup, see $log"
    fi
    [ "$(date +%s)" -lt $deadline ] || die "systemd --user did not answer within ${timeout}s, see $log"
    sleep 0.1
done

print_exports
