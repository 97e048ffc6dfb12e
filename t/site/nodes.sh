#!/bin/sh
# flux-sdexec site harness, N nodes on this machine: the system instance `sys` owned by the
# flux user with one broker per node, as flux-core's admin guide configures a cluster.
#
# Usage (root): t/site/nodes.sh up [N]|down|status|broker-up N|broker-ready N|manager-up N
#   up      N nodes (default 3): each its own mount and UTS namespace (hostname nodeN, its
#           own /run with /run/user/<flux uid> a tmpfs), its own non-root systemd manager of
#           the flux user (cgroup subtree sdexec-nodeN.slice/user-<uid>.slice/user@<uid>.service,
#           its session bus) and its broker; the brokers bootstrap from [bootstrap] hosts (one
#           per node, TCP on 127.0.0.(11+N), a CURVE certificate made by flux keygen). The users,
#           munge and the IMP are the single-node harness's (security.sh), with this harness's
#           own munged and configs, bound into each node over /run/munge and /etc/flux.
#   down    the brokers, managers, munged and namespace holders, each by its recorded pid; the
#           cgroup subtrees and $SITE_STATE removed: nothing is left.
#   broker-up N, broker-ready N: start node N's broker again (after a test killed it), wait
#           until it answers.
#   manager-up N: start node N's systemd manager again (after a test killed it and removed
#           its pidfile), wait until it answers.
set -u
SITE_SRCDIR=$(cd "$(dirname "$0")/../.." && pwd)
SITE_STATE=${NODES_STATE:-/var/lib/sdexec-nodes}
SITE_CONF=$SITE_STATE/etc-flux/system/conf.d # bound over /etc/flux on every node
SITE_IMP_CONF=$SITE_STATE/etc-flux/imp/conf.d
SITE_SIGN_CONF=$SITE_STATE/etc-flux/security/conf.d
SITE_RUNDIR=/run/flux
. "$SITE_SRCDIR/t/site/lib.sh"
. "$SITE_SRCDIR/t/site/security.sh"
. "$SITE_SRCDIR/t/site/instance.sh"
. "$SITE_SRCDIR/t/site/nodes-lib.sh"
NODES_CERT=/etc/flux/system/curve.cert # as each node sees it

nodes_count() {
    cat "$SITE_STATE/nodes" 2>/dev/null || echo 0
}

# nodes_config N: the cluster's config beside the site's system.toml and sdexec.toml.
nodes_config() {
    instance_config || return 1
    {
        echo "# written by flux-sdexec's t/site/nodes.sh: one broker per node (admin guide)"
        echo "[bootstrap]"
        echo "curve_cert = \"$NODES_CERT\""
        echo "hosts = ["
        for _n in $(seq 0 $(($1 - 1))); do
            _u="tcp://$(node_addr "$_n"):$NODES_PORT"
            echo "  { host = \"node$_n\", bind = \"$_u\", connect = \"$_u\" },"
        done
        echo "]"
        echo "[tbon]  # torpid in 10 s, lost 20 s after a send goes unanswered: short node tests"
        echo "torpid_max = \"10s\""
        echo "tcp_user_timeout = \"20s\""
    } >"$SITE_CONF/bootstrap.toml" || return 1
    _cert=$SITE_STATE/etc-flux/system/curve.cert
    if [ ! -s "$_cert" ]; then
        flux keygen "$_cert" >/dev/null && chown "$SITE_USER:" "$_cert" && chmod 0600 "$_cert"
    fi
}

# node_start N: node N's namespace holder, its /run and binds; waits until it is in place.
node_start() {
    site_pid "node-$1" >/dev/null && return 0
    _uid=$(site_uid "$SITE_USER")
    _gid=$(id -g "$SITE_USER")
    install -d -m 0755 "$SITE_STATE/node$1" || return 1
    install -d -o "$SITE_USER" -g "$_gid" -m 0755 "$SITE_STATE/node$1/flux" \
        "$SITE_STATE/node$1/flux/tmp" || return 1
    unshare --mount --uts --propagation private /bin/sh -ec '
        hostname "node$1"
        mount -t tmpfs -o mode=0755,size=64m "sdexec-node$1-run" /run
        mkdir -p /run/user /run/munge /run/systemd/system
        install -d -o "$2" -g "$3" -m 0755 /run/flux
        install -d -m 0700 "/run/user/$2"
        mount -t tmpfs -o "mode=0700,uid=$2,gid=$3,size=64m" "sdexec-node$1-user" "/run/user/$2"
        mount --bind "$4/munge" /run/munge
        mount --bind "$4/etc-flux" /etc/flux
        exec sleep infinity' node "$1" "$_uid" "$_gid" "$SITE_STATE" \
        </dev/null >>"$SITE_STATE/node$1/holder.log" 2>&1 &
    site_record "node-$1" $!
    site_wait_until 10 node_in_place "$1" || {
        cat "$SITE_STATE/node$1/holder.log" >&2
        return 1
    }
}
node_in_place() {
    _p=$(site_pid "node-$1") && [ "$(cat "/proc/$_p/comm" 2>/dev/null)" = sleep ]
}

# broker_up N: node N's broker as flux.service starts it (config path, rundir, local URI,
# rc2_none, sd-notify), as the flux user in node N. Without flux.service's statedir, a broker
# keeps its content store in a folder it makes in TMPDIR and removes when it exits; one a
# test kills leaves it, so TMPDIR is the node's own, removed with the harness's state.
broker_up() {
    # its previous life may linger as a zombie (pid 1 here reaps late): that one is gone
    _bp=$(site_pid "broker-$1") && ! site_pid_gone "$_bp" && return 0
    node_enter "$1" true || return 1
    (
        SITE_NODE=$1
        exec 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&- # a test's (sharness's) descriptors
        as_user_exec "$SITE_USER" env -u FLUX_URI TMPDIR="$SITE_STATE/node$1/flux/tmp" \
            setsid flux broker \
            --config-path=/etc/flux/system/conf.d -Srundir=/run/flux \
            -Slocal-uri="$NODES_LOCAL_URI" -Slog-stderr-level=6 \
            -Slog-filename="$SITE_STATE/node$1/flux/broker.log" -Sbroker.rc2_none \
            -Sbroker.quorum=1 -Sbroker.sd-notify=1 -Sbroker.module-nopanic=1 \
            </dev/null >>"$SITE_STATE/node$1/broker.out" 2>&1
    ) &
    site_record "broker-$1" $!
}
broker_answers() {
    [ "$(node_user "$1" "$SITE_USER" timeout 10 flux getattr rank 2>/dev/null)" = "$1" ]
}
sdexec_running() {  # rc1 loaded our module on node N and it runs (S column: R)
    node_user "$1" "$SITE_USER" timeout 10 flux module list 2>/dev/null |
        awk '$1 == "sdexec" && $3 == "R" {ok = 1} END {exit !ok}'
}
broker_ready() {
    site_wait_until "$SITE_TIMEOUT" broker_answers "$1" &&
        site_wait_until "$SITE_TIMEOUT" sdexec_running "$1" || {
        tail -n 20 "$SITE_STATE/node$1/broker.out" "$SITE_STATE/node$1/flux/broker.log" >&2
        return 1
    }
    _bp=$(node_user "$1" "$SITE_USER" flux getattr broker.pid) || return 1
    [ "$_bp" = "$(site_pid "broker-$1")" ] || site_record "broker-$1" "$_bp"
}
nodes_ready() {
    _up=$(node_user 0 "$SITE_USER" timeout 10 flux resource status -s avail -no '{ranks}' 2>/dev/null)
    [ "$_up" = "0-$(($(nodes_count) - 1))" ] || [ "$(nodes_count)" = 1 -a "$_up" = 0 ]
}

nodes_up() {
    _why=$("$SITE_SRCDIR/t/site/site.sh" why-not)
    [ -z "$_why" ] || site_die "cannot run here: $_why"
    [ ! -s "$SITE_STATE/nodes" ] || [ "$(nodes_count)" = "$1" ] ||
        site_die "$(nodes_count) nodes are up: make site-down first"
    install -d -m 0755 "$SITE_STATE" "$SITE_STATE/etc-flux/system" || exit 1
    echo "$1" >"$SITE_STATE/nodes"
    install -d -o munge -g munge -m 0755 "$SITE_STATE/munge" || exit 1
    site_say "users"; users_up || site_die "could not create the users"
    guest_job_tmpdirs_down
    site_say "IMP";   imp_up || site_die "could not install the IMP"
    site_say "config"; nodes_config "$1" || site_die "could not write $SITE_CONF"
    for _n in $(seq 0 $(($1 - 1))); do
        site_say "node$_n"
        node_start "$_n" || site_die "could not set up node$_n"
        [ "$_n" != 0 ] || node_do 0 env SITE_STATE="$SITE_STATE" /bin/sh -c \
            '. "$SITE_SRCDIR/t/site/lib.sh" && . "$SITE_SRCDIR/t/site/security.sh" && munge_up' ||
            site_die "could not start munged"
        node_do "$_n" manager_up || site_die "could not start node$_n's manager"
    done
    for _n in $(seq 0 $(($1 - 1))); do
        broker_up "$_n" || site_die "could not start node$_n's broker"
    done
    for _n in $(seq 0 $(($1 - 1))); do
        broker_ready "$_n" || site_die "node$_n's broker did not answer"
    done
    site_wait_until "$SITE_TIMEOUT" nodes_ready || site_die "not every node is up"
    nodes_env >"$SITE_STATE/env"
    echo "site up: $1 nodes; as root: . $SITE_STATE/env; node_user N USER flux ..." \
        "(node0: as_user USER flux ...)"
}

# nodes_env: what a shell sources to reach the nodes (used by the node tests).
nodes_env() {
    for _v in SITE_USER SITE_GUESTS SITE_GUEST_GROUP SITE_STATE SITE_CONF SITE_IMP_CONF \
        SITE_RUNDIR SITE_SRCDIR; do
        eval "printf '%s=\"%s\"\n' $_v \"\$$_v\""
    done
    echo "SITE_SIZE=$(nodes_count)"
    echo ". \"$SITE_SRCDIR/t/site/lib.sh\""
    echo ". \"$SITE_SRCDIR/t/site/nodes-lib.sh\""
}

nodes_down() {
    [ "$(id -u)" = 0 ] || site_die "not root"
    [ -d "$SITE_STATE" ] || { site_say "not up"; return 0; }
    _nodes=$(seq 0 $(($(nodes_count) - 1)))
    site_say "instance"
    if site_pid broker-0 >/dev/null && broker_answers 0; then
        node_user 0 "$SITE_USER" timeout "$SITE_TIMEOUT" flux shutdown --quiet >/dev/null 2>&1 ||
            site_say "flux shutdown failed"
    fi
    for _n in $_nodes; do
        site_stop_pid "broker-$_n" 30
    done
    for _n in $_nodes; do
        site_say "node$_n"
        if site_pid "node-$_n" >/dev/null; then
            node_do "$_n" manager_down 2>&1 | grep -v "rm: cannot remove.*busy" >&2
        fi
        site_stop_pid "node-$_n"
    done
    site_stop_pid munged
    guest_job_tmpdirs_down
    for _n in $_nodes; do
        for _h in systemd unified; do
            rmdir "/sys/fs/cgroup/$_h/$(node_slice "$_n")" 2>/dev/null
        done
    done
    rm -rf "$SITE_STATE"
    site_say "down"
}

nodes_status() {
    for _n in $(seq 0 $(($(nodes_count) - 1))); do
        echo "node$_n: holder $(site_pid "node-$_n" || echo -) manager $(node_manager_pid "$_n" ||
            echo -) broker $(site_pid "broker-$_n" || echo -)"
    done
    echo "munged: $(site_pid munged || echo -)"
}

case ${1:-} in
up) nodes_up "${2:-3}" ;;
down) nodes_down ;;
status) nodes_status ;;
broker-up) broker_up "$2" ;;
broker-ready) broker_ready "$2" ;;
manager-up) node_do "$2" manager_up ;;
*) site_die "usage: $0 up [N]|down|status|broker-up N|broker-ready N|manager-up N" ;;
esac
