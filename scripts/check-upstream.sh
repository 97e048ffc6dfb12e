#!/bin/bash
# make check-upstream: flux-core's own sdexec suites, run from a flux-core build tree
# against this checkout's modules.
#
#   FLUX_CORE_BUILD   the build tree (default: the newest one `make flux-core` kept under
#                     /var/tmp/flux-sdexec; `make check-upstream` builds one first when there
#                     is none, scripts/setup.sh flux-tree)
#   UPSTREAM_SUITES   which suites (default: the sdexec ones below)
#   UPSTREAM_RESULTS  where each suite's log goes (default t/upstream-results)
#   UPSTREAM_TIMEOUT  seconds each suite may run (default 900)
#
# The build's C sdexec.so* must not be found (flux's module search tries `.so*` in every
# folder before any `.py`). As root the run gets a mount namespace of its own, where a copy of
# the build's module folder without them is mounted over it: the tree never changes, so runs
# sharing it (the two v2 guests, scripts/vm/check-v2.sh) leave each other alone. Otherwise
# they are moved aside for the run, one run at a time per tree, and put back afterwards, also
# on failure or interrupt. Each suite's log is kept in UPSTREAM_RESULTS.
set -uo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
SUITES=${UPSTREAM_SUITES:-"t2409-sdexec t2410-sdexec-memlimit t2411-sdexec-job t2415-sdexec-device
    t2416-sdexec-constrain-resources t2420-job-exec-bgexec-sdexec t2421-sdexec-bg"}
die() { echo "check-upstream: $*" >&2; exit 1; }
# shellcheck source=scripts/build-lib.sh
. "$repo/scripts/build-lib.sh"
BUILD=$(flux_core_build)
[ -n "$BUILD" ] || die "$(flux_core_no_build): run make flux-core, or set FLUX_CORE_BUILD"
[ -x "$BUILD/src/cmd/flux" ] && [ -d "$BUILD/t" ] || die "$BUILD is not a built flux-core tree"
libs="$BUILD/src/modules/.libs"
aside="$BUILD/.flux-sdexec-aside"
results=${UPSTREAM_RESULTS:-$repo/t/upstream-results}
timeout=${UPSTREAM_TIMEOUT:-900}
mkdir -p "$results" "$aside"

if [ -z "${CHECK_UPSTREAM_NS:-}" ] && [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
    CHECK_UPSTREAM_NS=1 exec unshare -m --propagation private "$0" "$@"
fi
restore() { mv -f "$aside"/sdexec.so* "$libs"/ 2>/dev/null || true; }
restore  # a run killed outright (SIGKILL) may have left them aside
if [ -n "${CHECK_UPSTREAM_NS:-}" ]; then
    view=$(mktemp -d) || exit 1
    trap 'rm -rf "$view"' EXIT  # its mount goes with this namespace
    cp -a "$libs"/. "$view"/ && rm -f "$view"/sdexec.so* && mount --bind "$view" "$libs" ||
        die "could not mount a copy of $libs without the C sdexec.so* over it"
    hidden="hidden by a mount of this run's own"
else
    # One run at a time per build tree: the C module is out of place while it runs.
    exec 9>"$BUILD/.flux-sdexec-upstream.lock"
    flock -w 1800 9 || die "another check-upstream holds $BUILD for over 30 minutes"
    trap restore EXIT
    mv "$libs"/sdexec.so* "$aside"/ 2>/dev/null
    hidden="moved aside"
fi
trap 'exit 130' INT
trap 'exit 143' TERM
! ls "$libs"/sdexec.so* >/dev/null 2>&1 || die "could not hide the C sdexec.so* in $libs"

export FLUX_MODULE_PATH_PREPEND="$repo/flux_sdexec/modules"
echo "check-upstream: $BUILD/t against $FLUX_MODULE_PATH_PREPEND (C sdexec.so $hidden)"
# Make sure `flux module load sdexec` in that tree loads ours (it logs its unit glob).
"$BUILD/src/cmd/flux" start -Sbroker.rc1_path= -Sbroker.rc3_path= \
    sh -c 'flux module load sdexec && flux dmesg | grep -q "units named <label>:"' ||
    die "the build's flux does not load this checkout's sdexec module"

failed=0
for suite in $SUITES; do
    script="$BUILD/t/$suite.t"
    log="$results/$suite.log"
    if [ ! -f "$script" ]; then
        echo "$suite: MISSING from $BUILD/t"
        failed=1
        continue
    fi
    start=$(date +%s)
    (cd "$BUILD/t" && timeout -k 10 "$timeout" "./$suite.t" -v) >"$log" 2>&1
    rc=$?
    took="$(($(date +%s) - start)) s"
    pass=$(grep -c -E '^ok [0-9]+' "$log" | tr -d '\n')
    skip=$(grep -c -E '^ok [0-9]+ # skip' "$log" | tr -d '\n')
    fail=$(grep -E '^not ok [0-9]+' "$log" | grep -c -v '# TODO' | tr -d '\n')
    skip_all=$(sed -n 's/^1\.\.0 # SKIP[[:space:]]*//p' "$log")
    if [ -n "$skip_all" ]; then
        echo "$suite: SKIPPED: $skip_all ($took)"
    else
        echo "$suite: $((pass - skip)) passed, $fail failed, $skip skipped ($took)"
    fi
    if [ "$rc" -ne 0 ] || [ "$fail" -ne 0 ]; then
        failed=1
        [ "$rc" -eq 124 ] && echo "$suite: timed out after $timeout s"
        grep -E '^not ok [0-9]+' "$log" | sed 's/^/    /'
        echo "    (exit $rc; log: $log); the first failure:"
        "$repo/scripts/first-failure.sh" "$log"
    fi
done
[ "$failed" -eq 0 ] && echo "check-upstream: all suites passed or skipped themselves"
exit "$failed"
