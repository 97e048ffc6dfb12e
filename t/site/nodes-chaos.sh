#!/bin/sh
# flux-sdexec: the chaos test (t/chaos, doc/dev/chaos.md) on the nodes of t/site/nodes.sh,
# with node faults: a node's broker SIGKILLed and started again (never rank 0's: the instance
# would end), a node's systemd manager SIGKILLed and started again.
#
# Usage (root, nodes up; take the machine's lock):
#   flock /tmp/sdexec-systemd.lock t/site/nodes-chaos.sh [python3 -m chaos options]
#   e.g. --seed 7 --duration 120 --methods bgexec,bulk-exec
# The run is root's (an owner of the instance: allow-root-owner), in node0's namespaces, where
# the instance's local URI is; the guests submit its jobs in turn (multi-user jobs through the
# IMP). Node N's systemctl and busctl, as the flux user in node N, are wrappers in
# $CHAOS_NODES_WRAP/nodeN; $CHAOS_SET_METHOD METHOD sets job-exec's method. The site's own
# config is back afterwards.
set -u
. "${NODES_STATE:-/var/lib/sdexec-nodes}/env" || exit 1
wrap=$(mktemp -d /tmp/sdexec-nodes-chaos.XXXXXX)
trap 'rm -rf "$wrap"; rm -f "$SITE_CONF/zz-chaos.toml"; node_user 0 "$SITE_USER" flux config reload' EXIT

_uid=$(id -u "$SITE_USER")
_gid=$(id -g "$SITE_USER")
_rt=/run/user/$_uid
for _n in $(seq 0 $((SITE_SIZE - 1))); do
    mkdir "$wrap/node$_n" || exit 1
    for _tool in systemctl busctl; do
        cat >"$wrap/node$_n/$_tool" <<-EOF
	#!/bin/sh
	exec nsenter -t $(node_holder "$_n") -m -u -- setpriv --reuid=$_uid --regid=$_gid \\
	    --init-groups env -i HOME=$(site_home "$SITE_USER") PATH=$SITE_PATH \\
	    XDG_RUNTIME_DIR=$_rt DBUS_SESSION_BUS_ADDRESS=unix:path=$_rt/bus \\
	    $(command -v $_tool) "\$@"
	EOF
        chmod 0755 "$wrap/node$_n/$_tool"
    done
done
cat >"$wrap/set-method" <<-EOF
	#!/bin/sh
	# set-method METHOD: job-exec launches new jobs with METHOD (bgexec or bulk-exec)
	. "$SITE_STATE/env" || exit 1
	printf '[exec]\nmethod = "%s"\n' "\$1" >"$SITE_CONF/zz-chaos.toml" &&
	    node_user 0 "$SITE_USER" flux config reload &&
	    node_user 0 "$SITE_USER" flux module stats job-exec | jq -e ".method == \"\$1\"" >/dev/null
	EOF
chmod 0755 "$wrap/set-method"

node_enter 0 env -C "$SITE_SRCDIR" PATH="$wrap/node0:$PATH" PYTHONPATH="$SITE_SRCDIR/t" \
    CHAOS_GUESTS="$SITE_GUESTS" CHAOS_NODES_STATE="$SITE_STATE" CHAOS_SITE_USER="$SITE_USER" \
    CHAOS_NODES_SH="$SITE_SRCDIR/t/site/nodes.sh" CHAOS_NODES_WRAP="$wrap" \
    CHAOS_SET_METHOD="$wrap/set-method" CHAOS_BROKER_LOG="$SITE_STATE/node0/flux/broker.log" \
    python3 -m chaos --uri "$NODES_LOCAL_URI" --nodes "$SITE_SIZE" "$@"
