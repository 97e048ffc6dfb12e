#!/bin/sh
# What a slice per unit costs systemd: N `systemd-run --user --wait true` units, plain and each
# in a slice of its own (stopped after, as sdexec would), alternating, wall time per unit.
# Usage: bench/usage_slice.sh [N]   (needs the user manager: eval "$(t/start-user-systemd.sh)")
N=${1:-40}
run() {  # $1 = plain|slice
    start=$(date +%s%N)
    i=0
    while test $i -lt "$N"; do
        u=usage-bench-$$-$1-$i
        if test "$1" = slice; then
            s="app-usagebench-${$}x$i.slice"
            systemd-run --user -q --wait --unit="$u" --slice="$s" true
            systemctl --user stop "$s"
        else
            systemd-run --user -q --wait --unit="$u" true
            systemctl --user stop "$u"  # the same process spawn and call, on a stopped unit
        fi
        i=$((i + 1))
    done
    echo "$1 $(( ($(date +%s%N) - start) / N / 1000 ))"
}
for round in 1 2 3; do run plain; run slice; done | awk '
    {sum[$1] += $2; n[$1]++; print "round: " $1 " " $2 " us/unit"}
    END {p = sum["plain"] / n["plain"]; s = sum["slice"] / n["slice"];
         printf "mean: plain %d us/unit, slice %d us/unit, added %d us (%.0f%%)\n", p, s, s - p, 100 * (s - p) / p}'
systemctl --user stop app-usagebench.slice  # the per-unit slices' parent
