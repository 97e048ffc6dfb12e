# flux-sdexec: shared setup of the node tests (t/site/t011*.t), run as root against the nodes
# `make site-up NODES=3` started (t/site/nodes.sh). As in the other site tests, `owner`,
# `guest1` and `guest2` run flux commands, here on node0; node_user N USER CMD on node N.

SITE_ENV=${SITE_NODES_ENV:-/var/lib/sdexec-nodes/env}
. "$(dirname "$0")/sharness-site.sh"
NODES_SH=$SITE_SRCDIR/t/site/nodes.sh

if test "$SITE_SIZE" -lt 3; then
    skip_all="$SITE_SIZE nodes are up; these tests need 3 (make site-up NODES=3)"
    test_done
fi
LAST=$((SITE_SIZE - 1))

# node_shells N: node N's job shell units (bulk-exec's imp-shell-*.service, bgexec's
# imp-shell-*:sys.service), loaded or not.
node_shells() {
    node_units "$1" "imp-shell-*" "shell-*"
}
# shell_units_left (replaces sharness-site.sh's): every node's job shell units, "nodeN UNIT".
shell_units_left() {
    for _n in $(seq 0 $LAST); do
        node_shells $_n | sed "s/^/node$_n /"
    done
}
no_node_shells() {
    test -z "$(node_shells "$1")"
}
# shells_of N ID: node N's shell units of job ID.
shells_of() {
    _f=$(owner flux job id --to=f58plain "$2")
    node_units "$1" "imp-shell-*-$_f*.service"
}
# guest_job ARGS: submit a job as guest1, wait until its shells started; prints its id.
guest_job() {
    _id=$(guest1 flux submit "$@") &&
        guest1 flux job wait-event -t $T -p exec "$_id" shell.start >/dev/null &&
        echo "$_id"
}
# job_exception ID: the note of ID's first exception event, once the job is clean.
job_exception() {
    owner flux job wait-event -t $T "$1" clean >/dev/null &&
        owner flux job eventlog "$1" | awk '$2 == "exception" {$1 = $2 = ""; print; exit}'
}
# no_job_procs N: no process but the flux user's in node N's cgroup subtree.
no_job_procs() {
    for _p in $(find /sys/fs/cgroup/unified/$(node_slice $1) -name cgroup.procs \
        -exec cat {} + 2>/dev/null); do
        test "$(ps -o uid= -p $_p | tr -d " ")" = "$(id -u $SITE_USER)" || return 1
    done
}
node_alive() {
    kill -0 "$1" 2>/dev/null && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null
}
# ranks_avail: the ranks the scheduler may use now.
ranks_avail() {
    owner flux resource status -s avail -no "{ranks}"
}
all_avail() {
    test "$(ranks_avail)" = "0-$LAST"
}
# no_guest_procs (replaces sharness-site.sh's, as other site instances may run the guests'
# jobs meanwhile): no guest process in any node's cgroup subtree.
no_guest_procs() {
    for _n in $(seq 0 $LAST); do
        for _p in $(find /sys/fs/cgroup/unified/$(node_slice $_n) -name cgroup.procs \
            -exec cat {} + 2>/dev/null); do
            for _g in $SITE_GUESTS; do
                test "$(ps -o uid= -p $_p | tr -d " ")" != "$(id -u $_g)" || return 1
            done
        done
    done
}
# site_ranks_config_is FILE (replaces sharness-site.sh's): each node's broker, asked on its
# own node, has the config in FILE.
site_ranks_config_is() {
    for _n in $(seq 1 $LAST); do
        node_user $_n "$SITE_USER" timeout 10 flux config get | jq -S . | cmp -s - "$1" ||
            return 1
    done
}
