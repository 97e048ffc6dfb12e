#!/bin/bash
# Soak: RSS growth per job of each broker and of our module, beside flux-core's C sdexec.
#
# Usage: bench/soak.sh [soak.py options, e.g. --batch 250 --json DIR/soak.json]
#        (or `make soak`)
#
# For each order in ORDERS, one `flux start --test-size=2` instance with [exec] service =
# "sdexec" loads each module in turn on both ranks (plus sdbus for C), runs WARMUP jobs, then
# JOBS `true` jobs in bursts, and prints the KiB per job after the warm-up of each broker and of
# our module's process on each rank, under C and under ours (bench/soak.py). With --json F,
# order O's samples go to F with O appended to its name.
#
# Environment: JOBS (default 5000), WARMUP (200), ORDERS ("C,ours ours,C"), BENCH_TIMEOUT
# (seconds per instance; default allows 4 jobs/s), and instance.sh's C_MODULE, PY_MODULE, USAGE.
set -euo pipefail

name=soak.sh
JOBS=${JOBS:-5000}
WARMUP=${WARMUP:-200}
ORDERS=${ORDERS:-C,ours ours,C}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-$(((JOBS + WARMUP) / 2 + 300))}
# shellcheck source=bench/instance.sh
. "$(dirname "$0")/instance.sh"

json=
args=()
while [ $# -gt 0 ]; do
    case $1 in
    --json) json=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
    esac
done

bench_which
echo "$name: $WARMUP warm-up + $JOBS jobs per module, orders: $ORDERS"
rc=0
for order in $ORDERS; do
    out=()
    [ -z "$json" ] || out=(--json "$json.${order/,/-}")
    bench_run "$here/soak.py" --jobs "$JOBS" --warmup "$WARMUP" --order "$order" \
        ${args[@]+"${args[@]}"} ${out[@]+"${out[@]}"} || rc=$?
done
exit $rc
