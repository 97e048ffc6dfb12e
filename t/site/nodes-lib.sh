# flux-sdexec site harness, N nodes on one machine: names, paths and helpers shared by
# t/site/nodes.sh and the node tests (sourced after t/site/lib.sh).
#
# Node N is a namespace holder process (its pid in $SITE_STATE/node-N.pid) in its own mount
# and UTS namespace: hostname nodeN, its own /run (a tmpfs: /run/user/<flux uid> a tmpfs in
# it, /run/flux the broker's rundir), and /etc/flux and /run/munge bound from $SITE_STATE so
# that its IMP, signing and system configs and its munged are the harness's, not the host's.
# Everything of node N (its systemd manager, its broker, the flux commands of the tests) is
# started in those namespaces by nsenter on that pid.

NODES_LOCAL_URI=local:///run/flux/local  # flux.service's local-uri, on every node
NODES_PORT=${NODES_PORT:-8750}           # the overlay's TCP port on each node's address

# node_addr N: the loopback address of node N's overlay endpoint.
node_addr() {
    echo "127.0.0.$((11 + $1))"
}
node_holder() {
    site_pid "node-$1"
}
# node_slice N: node N's stand-in for user.slice (its manager's cgroup subtree is under it).
node_slice() {
    echo "sdexec-node$1.slice"
}
# node_enter N CMD...: run CMD as root in node N's mount and UTS namespaces.
node_enter() {
    _holder=$(node_holder "$1") || {
        echo "node$1 is not up (no node-$1.pid)" >&2
        return 1
    }
    shift
    nsenter -t "$_holder" -m -u -- "$@"
}
# node_do N FUNC [ARGS]: a function of the shared harness (lib.sh, security.sh, manager.sh),
# run as root in node N, with node N's state dir and cgroup slice.
node_do() {
    _n=$1
    shift
    node_enter "$_n" env SITE_STATE="$SITE_STATE/node$_n" SITE_SLICE="$(node_slice "$_n")" \
        SITE_SRCDIR="$SITE_SRCDIR" SITE_USER="$SITE_USER" SITE_TIMEOUT="$SITE_TIMEOUT" \
        /bin/sh -c '. "$SITE_SRCDIR/t/site/lib.sh" && . "$SITE_SRCDIR/t/site/security.sh" &&
            . "$SITE_SRCDIR/t/site/manager.sh" && "$@"' node-do "$@"
}

# The clients: as_user and as_user_exec (lib.sh) run in node ${SITE_NODE:-0}, the login
# node, with its local URI. node_user N USER CMD...: the same on node N.
as_user_exec() {
    _as=$1
    shift
    exec nsenter -t "$(node_holder "${SITE_NODE:-0}")" -m -u -- env SITE_SRCDIR="$SITE_SRCDIR" \
        SITE_USER="$SITE_USER" /bin/sh -c '. "$SITE_SRCDIR/t/site/lib.sh" && as_user_exec "$@"' \
        as-user "$_as" FLUX_URI="$NODES_LOCAL_URI" "$@"
}
node_user() {
    (
        SITE_NODE=$1
        shift
        as_user_exec "$@"
    )
}
site_uri() {
    echo "$NODES_LOCAL_URI"
}
# node_systemctl N ARGS: the flux user's systemd manager of node N.
node_systemctl() {
    _n=$1
    shift
    node_user "$_n" "$SITE_USER" systemctl --user "$@"
}
# node_units N PATTERN...: the names of node N's units matching PATTERN (loaded or not).
node_units() {
    _n=$1
    shift
    node_systemctl "$_n" list-units --all --plain --no-legend "$@" | awk '{print $1}'
}
# node_broker_pid N: node N's broker while it lives (recorded by nodes.sh).
node_broker_pid() {
    site_pid "broker-$1"
}
node_manager_pid() {
    (
        SITE_STATE="$SITE_STATE/node$1"
        site_pid manager
    )
}
