#!/bin/bash
# scripts/vm/check-v2.sh: the v2 tier from the host (make check-v2), as two guests side by side,
# which keep this machine's two cores busy (TCG), so the tier takes about as long as the
# longer guest. Each guest's virtual CPUs take turns on one host thread (run.sh --tcg-thread
# single): with a thread for each, five threads on two cores ran 2-3 times slower. The work
# is split so that they take about as long (doc/dev/testing.md has each suite's time):
#
#   first    3 vCPUs (t2416 runs its MULTICORE tests only with more than 2): flux-core's
#            suites (t/v2/tier.sh's part "upstream"), then our t0011 and t0032
#   second   2 vCPUs (t0016 and t0045 want two cores): our other tests, then the production
#            instance ("ours production")
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

scripts/vm/run.sh --timeout "$timeout" --smp 2 --tcg-thread single --share "$build" -- \
    env V2_PARTS="ours production" V2_OURS="t0013-sdexec-containment-check.t
    t0016-sdexec-kernel-limits.t t0045-sdexec-containment-v2.t t0031-sdexec-usage.t" \
    FLUX_CORE_BUILD="$build" t/v2/tier.sh >"$second" 2>&1 &
second_pid=$!
scripts/vm/run.sh --timeout "$timeout" --smp 3 --tcg-thread single --share "$build" -- \
    env V2_PARTS="upstream ours" V2_OURS="t0011-sdexec-mapper.t t0032-sdexec-usage-tree.t" \
    FLUX_CORE_BUILD="$build" t/v2/tier.sh
rc_first=$?
wait "$second_pid"
rc_second=$?
echo "check-v2: the second guest (our tests, the production instance):"
cat "$second"
echo "check-v2: both $v2_release guests done in $((SECONDS - start)) s"
[ "$rc_first" = 0 ] && [ "$rc_second" = 0 ]
