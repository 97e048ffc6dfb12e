#!/bin/bash
# scripts/vm/check-v2.sh: the v2 tier from the host (make check-v2), as two guests side by side:
# one runs flux-core's suites (t/v2/tier.sh's part "upstream"), the other our own tests and the
# production instance ("ours production"). Under TCG a guest leaves about a third of this
# machine's two cores idle while its tests wait on timers and daemons, so the two overlap: the
# tier takes about as long as its longest part. The first guest's output is printed as it
# comes, the second's once both are done; the exit status is 1 when either failed.
#
#   V2_RELEASE        the guests' Debian release: bookworm (default) or trixie
#   FLUX_CORE_BUILD   flux-core's build tree, shared with the first guest (check-upstream.sh;
#                     for a release other than this machine's, the one its build root made)
#   V2_TIMEOUT        seconds each guest may run (default 1800)
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top" || exit 1
# shellcheck source=scripts/vm/release-lib.sh
. scripts/vm/release-lib.sh
# shellcheck source=scripts/build-lib.sh
. scripts/build-lib.sh
build=$(flux_core_build)
flux_core_built "$build" || { echo "check-v2: $(flux_core_no_build): run make flux-core" >&2; exit 1; }
timeout=${V2_TIMEOUT:-1800}
start=$SECONDS
second=$(mktemp)
trap 'rm -f "$second"' EXIT

scripts/vm/run.sh --timeout "$timeout" -- env V2_PARTS="ours production" t/v2/tier.sh \
    >"$second" 2>&1 &
ours=$!
scripts/vm/run.sh --timeout "$timeout" --share "$build" -- \
    env V2_PARTS=upstream FLUX_CORE_BUILD="$build" t/v2/tier.sh
rc_upstream=$?
wait "$ours"
rc_ours=$?
echo "check-v2: the second guest (our tests, the production instance):"
cat "$second"
echo "check-v2: both $v2_release guests done in $((SECONDS - start)) s"
[ "$rc_upstream" = 0 ] && [ "$rc_ours" = 0 ]
