#!/bin/sh
# make demo: a 2-broker instance loading our sdexec through conf.d, a few commands, their units.
set -e
repo=$(cd "$(dirname "$0")/.." && pwd)
confdir=$(mktemp -d)
trap 'rm -rf "$confdir"' EXIT
sed -e "s|^sdexec.module = .*|sdexec.module = \"$repo/flux_sdexec/modules/sdexec.py\"|" \
    -e "s|^sdexec-mapper.module = .*|sdexec-mapper.module = \"$repo/flux_sdexec/modules/sdexec-mapper.py\"|" \
    "$repo/conf.d/sdexec.toml" >"$confdir/sdexec.toml"

flux start --test-size=2 --config-path="$confdir" sh -c '
    set -x
    flux module list | grep sdexec
    flux dmesg | grep "units named"
    instance=$(flux dmesg | sed -n "s/.*units named <label>:\([^.]*\)\.service.*/\1/p" | head -1)
    flux exec --service sdexec -r all hostname
    flux exec --service sdexec -r 0 sh -c "echo to stdout; echo to stderr >&2; exit 3" || true
    flux exec --service sdexec -r 0 /notacmd || true
    flux exec --service sdexec -r all --label=demo sleep 30 &
    client=$!
    until systemctl --user -q is-active "demo-1:$instance.service"; do sleep 0.1; done
    systemctl --user list-units --no-pager "*:$instance.service"
    flux sproc ps -s sdexec -r 1
    kill $client; wait $client || true
'
