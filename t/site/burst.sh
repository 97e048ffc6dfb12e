#!/bin/sh
# flux-sdexec site acceptance run: N guest jobs through the real IMP on the site instance.
#
# Usage (root, a site up): t/site/burst.sh [N]   (default 200)
# Runs on whichever harness is up: the N nodes of t/site/nodes.sh (`make site-up NODES=3`),
# else the single node of t/site/site.sh. Half the jobs with bulk-exec, half with bgexec;
# alternately of each guest; of 1 to 3 nodes (at most the instance's size), every guest with
# every size; each task prints its broker's rank and its uid and exits with the job's own code.
# Prints, per method, the jobs whose exit code, uid, ranks or output was wrong, then the units
# and guest processes left on every node (after a bounded wait); exits 1 when any figure is
# not right.
set -u
NODES_ENV=${SITE_NODES_ENV:-/var/lib/sdexec-nodes/env}
if [ -r "$NODES_ENV" ]; then
    . "$NODES_ENV" || exit 1
    nodes=$(seq 0 $((SITE_SIZE - 1))) where=nodes
else
    . /run/sdexec-site/env || { echo "burst: no site is up (make site-up [NODES=3])" >&2; exit 1; }
    nodes= where="brokers of one node"
fi
N=${1:-200}
work=$(mktemp -d /tmp/sdexec-burst.XXXXXX)
trap 'rm -rf "$work"; rm -f "$SITE_CONF/zz-burst.toml"; as_user "$SITE_USER" flux config reload' EXIT
guests() { echo $SITE_GUESTS | tr ' ' '\n'; }
nguest=$(guests | wc -l)
sizes=$((SITE_SIZE < 3 ? SITE_SIZE : 3))

method() {
    printf '[exec]\nmethod = "%s"\n' "$1" >"$SITE_CONF/zz-burst.toml"
    as_user "$SITE_USER" flux config reload || exit 1
    as_user "$SITE_USER" flux module stats job-exec | grep -q "\"method\": *\"$1\"" ||
        { echo "burst: job-exec did not switch to $1" >&2; exit 1; }
}
# units_left: the job shell units of every node's manager ("nodeN:UNIT" on nodes).
units_left() {
    _pat="imp-shell-* *:sys.service imp?x2dshell* *:sys.slice"  # keepers: keepers.py
    if [ -z "$nodes" ]; then
        as_user "$SITE_USER" systemctl --user list-units --all --plain --no-legend $_pat |
            awk '{print $1}'
    fi
    for _n in $nodes; do
        node_units "$_n" $_pat | sed "s/^/node$_n:/"
    done
}
# subtrees: the cgroup subtree of every node's manager of the flux user.
subtrees() {
    [ -n "$nodes" ] || site_cgroup unified
    for _n in $nodes; do
        echo "/sys/fs/cgroup/unified/$(node_slice "$_n")"
    done
}
guest_procs_left() {
    for _g in $SITE_GUESTS; do
        for _p in $(ps -u "$_g" -o pid=,stat= | awk '$2 !~ /^Z/ {print $1}'); do
            _cg=/sys/fs/cgroup/unified$(sed -n 's/^0:://p' /proc/$_p/cgroup 2>/dev/null)
            for _sub in $(subtrees); do
                case $_cg in
                "$_sub"/*) echo "$_g $_p $(cat /proc/$_p/comm 2>/dev/null)" ;;
                esac
            done
        done
    done
}
# expected RANKS UID: one "RANK UID" line per rank of RANKS (flux jobs' {ranks}: a or
# [a,b-c]), sorted as the output is.
expected() {
    echo "$1" | tr -d '[]' | tr ',' '\n' | while IFS=- read -r _a _b; do
        seq "$_a" "${_b:-$_a}"
    done | sed "s/\$/ $2/" | sort
}

bad=0
start=$(date +%s)
for m in bulk-exec bgexec; do
    method $m
    mstart=$(date +%s)
    : >"$work/jobs"
    half=$((N / 2))
    for i in $(seq 1 $half); do
        g=$(guests | sed -n "$((i % nguest + 1))p")
        size=$((i / nguest % sizes + 1))
        code=$((i % 7))
        id=$(as_user "$g" flux submit -N$size -n$size \
            sh -c "echo \$(flux getattr rank) \$(id -u); exit $code") || exit 1
        echo "$g $id $code $size" >>"$work/jobs"
    done
    wrong=0 checked=0
    while read -r g id code size; do
        as_user "$g" timeout 120 flux job attach "$id" </dev/null >"$work/out" 2>"$work/err"
        rc=$?
        checked=$((checked + 1))
        set -- $(as_user "$g" flux jobs -n -o '{userid} {ranks}' "$id" </dev/null) "" ""
        want=$(expected "$2" "$(id -u "$g")")
        if [ $rc -ne "$code" ] || [ "$1" != "$(id -u "$g")" ] ||
            [ "$(echo "$want" | grep -c .)" -ne "$size" ] || [ "$(sort "$work/out")" != "$want" ]; then
            echo "burst: $m job $id of $g on ranks $2: exit $rc (want $code)," \
                "output $(cat "$work/out") $(cat "$work/err")" >&2
            wrong=$((wrong + 1))
        fi
    done <"$work/jobs"
    echo "burst: $m: $checked of $half guest jobs of 1-$sizes nodes checked in" \
        "$(($(date +%s) - mstart)) s, $wrong with a wrong exit code, uid, ranks or output"
    [ $wrong -eq 0 ] && [ $checked -eq $half ] || bad=1
done
echo "burst: $N jobs in $(($(date +%s) - start)) s on $SITE_SIZE $where"
no_units_left() { [ -z "$(units_left)" ]; }
site_wait_until 75 no_units_left
left=$(units_left)
procs=$(guest_procs_left)
echo "burst: units left: $(echo "$left" | grep -c .) $(echo $left)"
echo "burst: guest processes left: $(echo "$procs" | grep -c .) $(echo $procs)"
[ -z "$left" ] && [ -z "$procs" ] || bad=1
exit $bad
