#!/bin/bash
# scripts/vm/check-v2.sh: the v2 tier from the host (make check-v2), as two guests side by side,
# which keep this machine's two cores busy (TCG), so the tier takes about as long as the
# longer guest. The work is split so that they take about as long (2026-12-05, Debian 12:
# 1,951 s and 2,032 s; doc/dev/testing.md):
#
#   first    3 vCPUs (t2416 runs its MULTICORE tests only with more than 2): flux-core's
#            suites but the last (t/v2/tier.sh's part "upstream")
#   second   2 vCPUs (t0016 and t0045 want two cores; a third is only contention: a fork and
#            exec took twice as long in two 3-vCPU guests as in two 1-vCPU ones): our tests,
#            the production instance, then flux-core's t2421 ("ours production upstream")
#
# Both share flux-core's build tree (check-upstream.sh hides its C module with a mount of each
# guest's own). The first guest's output is printed as it comes, the second's once both are
# done; the exit status is 1 when either failed.
#
#   V2_RELEASE        the guests' Debian release: bookworm (default) or trixie
#   FLUX_CORE_BUILD   flux-core's build tree (for a release other than this machine's, the one
#                     its build root made)
#   V2_TIMEOUT        seconds each guest may run (default 3000)
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top" || exit 1
# shellcheck source=scripts/vm/release-lib.sh
. scripts/vm/release-lib.sh
# shellcheck source=scripts/build-lib.sh
. scripts/build-lib.sh
build=$(flux_core_build)
flux_core_built "$build" || { echo "check-v2: $(flux_core_no_build): run make flux-core" >&2; exit 1; }
timeout=${V2_TIMEOUT:-3000}
start=$SECONDS
second=$(mktemp)
trap 'rm -f "$second"' EXIT

scripts/vm/run.sh --timeout "$timeout" --smp 2 --share "$build" -- \
    env V2_PARTS="ours production upstream" V2_UPSTREAM_SUITES="t2421-sdexec-bg" \
    FLUX_CORE_BUILD="$build" t/v2/tier.sh >"$second" 2>&1 &
second_pid=$!
scripts/vm/run.sh --timeout "$timeout" --smp 3 --share "$build" -- \
    env V2_PARTS=upstream V2_UPSTREAM_SUITES="t2409-sdexec t2410-sdexec-memlimit t2411-sdexec-job
    t2412-sdmon t2413-sdmon-resource t2416-sdexec-constrain-resources" \
    FLUX_CORE_BUILD="$build" t/v2/tier.sh
rc_first=$?
wait "$second_pid"
rc_second=$?
echo "check-v2: the second guest (our tests, the production instance, t2421):"
cat "$second"
echo "check-v2: both $v2_release guests done in $((SECONDS - start)) s"
[ "$rc_first" = 0 ] && [ "$rc_second" = 0 ]
