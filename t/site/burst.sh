#!/bin/sh
# flux-sdexec site acceptance run: N guest jobs through the real IMP on the site instance.
#
# Usage (root, site up): t/site/burst.sh [N]   (default 200)
# Half the jobs with bulk-exec, half with bgexec; alternately of each guest; 1- and 2-node;
# each prints its uid on every node and exits with its own code. Prints, per method, the jobs
# whose exit code, uid or output was wrong, then the units and guest processes left in the
# site (after a bounded wait); exits 1 when any figure is not right.
set -u
. /run/sdexec-site/env || exit 1
N=${1:-200}
work=$(mktemp -d /tmp/sdexec-burst.XXXXXX)
trap 'rm -rf "$work"; rm -f "$SITE_CONF/zz-burst.toml"; as_user "$SITE_USER" flux config reload' EXIT
guests() { echo $SITE_GUESTS | tr ' ' '\n'; }
nguest=$(guests | wc -l)

method() {
    printf '[exec]\nmethod = "%s"\n' "$1" >"$SITE_CONF/zz-burst.toml"
    as_user "$SITE_USER" flux config reload || exit 1
    as_user "$SITE_USER" flux module stats job-exec | grep -q "\"method\": *\"$1\"" ||
        { echo "burst: job-exec did not switch to $1" >&2; exit 1; }
}
units_left() {
    as_user "$SITE_USER" systemctl --user list-units --all --plain --no-legend \
        'imp-shell-*' '*:sys.service' | awk '{print $1}'
}
guest_procs_left() {
    _sub=$(site_cgroup unified)
    for _g in $SITE_GUESTS; do
        for _p in $(ps -u "$_g" -o pid=,stat= | awk '$2 !~ /^Z/ {print $1}'); do
            case /sys/fs/cgroup/unified$(sed -n 's/^0:://p' /proc/$_p/cgroup 2>/dev/null) in
            "$_sub"/*) echo "$_g $_p $(cat /proc/$_p/comm 2>/dev/null)" ;;
            esac
        done
    done
}

bad=0
start=$(date +%s)
for m in bulk-exec bgexec; do
    method $m
    : >"$work/jobs"
    half=$((N / 2))
    for i in $(seq 1 $half); do
        g=$(guests | sed -n "$((i % nguest + 1))p")
        nodes=$((i % 2 + 1))
        code=$((i % 7))
        id=$(as_user "$g" flux submit -N$nodes -n$nodes sh -c "id -u; exit $code") || exit 1
        echo "$g $id $code $nodes" >>"$work/jobs"
    done
    wrong=0 checked=0
    while read -r g id code nodes; do
        as_user "$g" timeout 120 flux job attach "$id" </dev/null >"$work/out" 2>"$work/err"
        rc=$?
        checked=$((checked + 1))
        want=$(for n in $(seq $nodes); do id -u "$g"; done)
        if [ $rc -ne "$code" ] || [ "$(cat "$work/out")" != "$want" ] ||
            [ "$(as_user "$g" flux jobs -n -o '{userid}' "$id" </dev/null)" != "$(id -u "$g")" ]; then
            echo "burst: $m job $id of $g: exit $rc (want $code), output $(cat "$work/out")" >&2
            wrong=$((wrong + 1))
        fi
    done <"$work/jobs"
    echo "burst: $m: $checked of $half guest jobs checked, $wrong with a wrong exit code, uid or output"
    [ $wrong -eq 0 ] && [ $checked -eq $half ] || bad=1
done
echo "burst: $N jobs in $(($(date +%s) - start)) s"
no_units_left() { [ -z "$(units_left)" ]; }
site_wait_until 75 no_units_left
left=$(units_left)
procs=$(guest_procs_left)
echo "burst: units left: $(echo "$left" | grep -c .) $(echo $left)"
echo "burst: guest processes left: $(echo "$procs" | grep -c .) $(echo $procs)"
[ -z "$left" ] && [ -z "$procs" ] || bad=1
exit $bad
