#!/bin/sh
# flux-sdexec: the chaos test (t/chaos, doc/dev/chaos.md) on the site instance.
#
# Usage (root, site up; disturbs the flux user's manager: run it under the machine's lock):
#   flock /tmp/sdexec-systemd.lock t/site/chaos.sh [python3 -m chaos options: --seed N ...]
# The run is root's (an owner of the instance: allow-root-owner), with FLUX_URI of rank 0; its
# jobs are submitted by the guests in turn (CHAOS_GUESTS: multi-user jobs through the IMP),
# bgexec; its systemctl and busctl calls reach the flux user's manager and session bus as the
# flux user (wrappers first on PATH). The site's own config is back afterwards. The instance's
# log (CHAOS_BROKER_LOG) holds what a background job shell printed on stderr (sdexec logs it).
set -u
. /run/sdexec-site/env || exit 1
wrap=$(mktemp -d /tmp/sdexec-site-chaos.XXXXXX)
trap 'rm -rf "$wrap"; rm -f "$SITE_CONF/zz-chaos.toml"; as_user "$SITE_USER" flux config reload' EXIT

_rt=$(site_runtime_dir)
for tool in systemctl busctl; do
    cat >"$wrap/$tool" <<-EOF
	#!/bin/sh
	exec setpriv --reuid=$(id -u "$SITE_USER") --regid=$(id -g "$SITE_USER") --init-groups \\
	    env -i HOME=$(site_home "$SITE_USER") PATH=$SITE_PATH XDG_RUNTIME_DIR=$_rt \\
	    DBUS_SESSION_BUS_ADDRESS=unix:path=$_rt/bus $(command -v $tool) "\$@"
	EOF
    chmod 0755 "$wrap/$tool"
done
printf '[exec]\nmethod = "bgexec"\n' >"$SITE_CONF/zz-chaos.toml"
as_user "$SITE_USER" flux config reload || exit 1

cd "$SITE_SRCDIR" || exit 1
PATH=$wrap:$PATH CHAOS_GUESTS=$SITE_GUESTS CHAOS_BROKER_LOG="$(site_home "$SITE_USER")/broker.log" \
    PYTHONPATH=t python3 -m chaos --uri "$(site_uri)" "$@"
