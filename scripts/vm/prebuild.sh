#!/bin/bash
# scripts/vm/prebuild.sh: the v2 tier's images built, and its second guests booted, while `make
# check`'s host tiers run.
#
# The host tiers leave the two cores half idle (check-flux: 370 s of CPU in 611 s), and a
# fresh machine's images take minutes (Debian 12's 164 s, Debian 13's 311 s). So make check
# starts their builds (scripts/vm/build.sh, one release after another) first, at nice 19, and
# as each image is built, that release's second guest (scripts/vm/check-v2.sh --early, its
# output in the image's folder), at nice 19 too; the v2 tier waits for the builds and prints
# what they said, then boots every release's first guest at once and waits for the second
# ones (scripts/vm/check-releases.sh).
#
#   prebuild.sh start PID RELEASE...  build each RELEASE's image and boot its second guest in
#                                     the background, in a session of its own; stopped when
#                                     process PID (the make running make check) ends first,
#                                     as when a tier fails. Nothing when this machine cannot
#                                     build them (the v2 tier says why) or a prebuild runs
#                                     already.
#   prebuild.sh report                the host tiers are over: set the session back to
#                                     niceness 0 (as root), wait for the builds (at most
#                                     PREBUILD_WAIT seconds, default 1800) and print their
#                                     output; nothing when none ran
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
dir=${SDEXEC_BUILDS:-/var/tmp/flux-sdexec}  # the cache make flux-core and make vm keep
log=$dir/v2-prebuild.log
lock=$dir/v2-prebuild.lock
session=$dir/v2-prebuild.sid  # the session's id, for report

case ${1:-} in
start)
    [ $# -ge 3 ] || { echo "usage: prebuild.sh start PID RELEASE..." >&2; exit 2; }
    [ -z "$("$top/scripts/vm/build.sh" --why-not 2>/dev/null)" ] || exit 0
    mkdir -p "$dir" || exit 1
    exec 9>>"$lock"
    flock -n 9 || { echo "vm: an image build of another make check runs: not started again"; exit 0; }
    # the lock goes with the session (its fd inherited); the log is the session's output
    setsid "$0" build "${@:2}" >"$log" 2>&1 </dev/null &
    echo "vm: building the v2 images of ${*:3} in the background at nice 19 (log: $log)"
    ;;
build)  # the session: the builds and early guests, and the watcher of the make
    watched=$2
    shift 2
    started=$SECONDS
    echo $$ >"$session"
    # fd 9 (the lock) is handed to no build or guest: a daemon one leaves must not hold it
    tail --pid="$watched" -f /dev/null 9>&- &
    watcher=$!
    (
        rc=0 guests=
        for release; do
            if V2_RELEASE=$release nice -n 19 "$top/scripts/vm/build.sh" 9>&-; then
                V2_RELEASE=$release nice -n 19 "$top/scripts/vm/check-v2.sh" --early "$watched" 9>&- &
                guests="$guests $!"
            else
                rc=1
            fi
        done
        echo "vm: background image builds done in $((SECONDS - started)) s"
        exec 9>&-  # the lock: report goes on, the guests are check-v2's to wait for
        wait $guests
        exit $rc
    ) &
    work=$!
    exec 9>&-
    wait -n "$watcher" "$work"
    if ! kill -0 "$watcher" 2>/dev/null; then
        echo "vm: make ended first: the image builds and early guests stopped"
        kill -TERM -- -$$  # this session: the builds, the guests and their children
        exit 1
    fi
    wait "$work"
    rc=$?
    kill "$watcher"
    exit $rc
    ;;
report)
    [ -f "$log" ] || exit 0
    # the host tiers are over: what the session runs goes on at the default niceness (as
    # root), every thread of it (qemu's TCG thread is not its main one)
    sid=$(cat "$session" 2>/dev/null)
    if [ -n "$sid" ] && ps -o args= -p "$sid" | grep -q "prebuild.sh build"; then
        for pid in $(ps -eo pid=,sid= | awk -v sid="$sid" '$2 == sid { print $1 }'); do
            renice -n 0 -p $(ls "/proc/$pid/task" 2>/dev/null) >/dev/null 2>&1
        done
    fi
    flock -w "${PREBUILD_WAIT:-1800}" "$lock" true ||
        echo "vm: the background image build still runs after ${PREBUILD_WAIT:-1800} s"
    sed 's/^/prebuild: /' "$log"
    rm -f "$log"
    ;;
*)
    echo "usage: prebuild.sh start PID RELEASE... | report" >&2
    exit 2
    ;;
esac
