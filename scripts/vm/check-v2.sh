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
# In make check the second guest boots early: scripts/vm/prebuild.sh starts it at nice 19 as
# soon as the image is built, while the host tiers run (they leave about a core idle), with
# t0011 and t0032 too; `check-v2.sh --early MAKE_PID` is that guest, its output in
# VM_DIR/early.log. Then check-v2.sh, given the same MAKE_PID, boots the first guest with
# flux-core's suites alone (prebuild.sh report has set the early guests back to niceness 0),
# waits for the early one and prints its output.
#
# Every release's first guest boots at once (scripts/vm/check-releases.sh); where both guests
# boot now, one release's pair after another's (a lock beside the images).
#
# Both share flux-core's build tree (check-upstream.sh hides its C module with a mount of each
# guest's own). The first guest's output is printed as it comes, the second's once both are
# done; the exit status is 1 when either failed.
#
#   V2_RELEASE        the guests' Debian release: bookworm (default) or trixie
#   FLUX_CORE_BUILD   flux-core's build tree (for a release other than this machine's, the one
#                     its build root made)
#   V2_TIMEOUT        seconds each guest may run (default 3000; an early one 1,800 more: it
#                     shares the cores with the host tiers first)
#   MAKE_PID          the make running make check: its early guest is used when there is one
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
early_timeout=$((timeout + 1800))
early_log=$VM_DIR/early.log early_lock=$VM_DIR/early.lock early_make=$VM_DIR/early.make
pair_lock=$(dirname "$VM_DIR")/v2-pair.lock  # every release's
start=$SECONDS

# first_guest OURS: flux-core's suites, then our OURS (none: the upstream part alone)
first_guest() {
    scripts/vm/run.sh --timeout "$timeout" --smp 3 --tcg-thread single --share "$build" -- \
        env V2_PARTS="upstream${1:+ ours}" V2_OURS="$1" FLUX_CORE_BUILD="$build" t/v2/tier.sh
}

# second_guest TIMEOUT OURS: our OURS, then the production instance
second_guest() {
    scripts/vm/run.sh --timeout "$1" --smp 2 --tcg-thread single --share "$build" -- \
        env V2_PARTS="ours production" V2_OURS="$2" FLUX_CORE_BUILD="$build" t/v2/tier.sh
}

second_ours="t0013-sdexec-containment-check.t t0016-sdexec-kernel-limits.t
    t0045-sdexec-containment-v2.t t0031-sdexec-usage.t"
first_ours="t0011-sdexec-mapper.t t0032-sdexec-usage-tree.t"

if [ "${1:-}" = --early ]; then
    [ $# = 2 ] || { echo "usage: check-v2.sh --early MAKE_PID" >&2; exit 2; }
    exec 8>"$early_lock"
    flock -n 8 || { echo "check-v2: an early $v2_release guest runs already" >&2; exit 1; }
    echo "$2" >"$early_make"
    second_guest "$early_timeout" "$first_ours $second_ours" >"$early_log" 2>&1
    echo "check-v2: exit $?" >>"$early_log"
    exit 0
fi

if [ -n "${MAKE_PID:-}" ] && [ "$(cat "$early_make" 2>/dev/null)" = "$MAKE_PID" ]; then
    first_guest ""
    rc_first=$?
    flock -w "$early_timeout" "$early_lock" true ||
        echo "check-v2: the early guest still runs after $early_timeout s" >>"$early_log"
    echo "check-v2: the second guest (booted during the host tiers: our tests, the production instance):"
    cat "$early_log"
    rc_second=$(sed -n 's/^check-v2: exit \([0-9]*\)$/\1/p' "$early_log")
    rm -f "$early_log" "$early_make"
else
    # both guests boot now: after any other release's pair (scripts/vm/check-releases.sh)
    exec 7>"$pair_lock"
    flock -w $((2 * timeout)) 7 || { echo "check-v2: another pair of guests still runs" >&2; exit 1; }
    second=$(mktemp)
    trap 'rm -f "$second"' EXIT
    second_guest "$timeout" "$second_ours" >"$second" 2>&1 &
    second_pid=$!
    first_guest "$first_ours"
    rc_first=$?
    wait "$second_pid"
    rc_second=$?
    echo "check-v2: the second guest (our tests, the production instance):"
    cat "$second"
fi
echo "check-v2: both $v2_release guests done in $((SECONDS - start)) s"
[ "$rc_first" = 0 ] && [ "${rc_second:-1}" = 0 ]
