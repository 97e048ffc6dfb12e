#!/bin/bash
# scripts/vm/check-releases.sh: the v2 tier's releases (make check-v2's V2_RELEASES) at once.
#
#   check-releases.sh RELEASE...
#
# Each RELEASE's image is built (scripts/vm/build.sh: nothing to do when it is up to date, as
# after make check's background builds) and its guests booted (scripts/vm/check-v2.sh) as
# soon as it is there, every release's at once: in make check each second guest has run since
# its image was built, and with the releases one after another, Debian 13's first guest ran
# alone on one of the two cores for 16 minutes once Debian 12's were done. A release whose
# two guests both boot now (no early guest) waits for the one before it (check-v2.sh's pair
# lock): two guests keep the two cores busy already. The first release's output is printed
# as it comes, each other's once it is done, in order; the exit status is 1 when any release
# failed. V2_TIMEOUT and MAKE_PID are check-v2.sh's.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
[ $# -ge 1 ] || { echo "usage: check-releases.sh RELEASE..." >&2; exit 2; }
outputs=$(mktemp -d)
trap 'rm -rf "$outputs"' EXIT

# release RELEASE: its image built, then its guests, with its heading
release() {
    echo "== tier: v2 guest, $1 (systemd as pid 1, unified cgroup v2, flux.service)"
    V2_RELEASE=$1 "$top/scripts/vm/build.sh" && V2_RELEASE=$1 "$top/scripts/vm/check-v2.sh"
}

pids=()
for name; do
    if [ ${#pids[@]} = 0 ]; then
        release "$name" &
    else
        release "$name" >"$outputs/$name" 2>&1 &
    fi
    pids+=($!)
done
rc=0
i=0
for name; do
    wait "${pids[$i]}" || rc=1
    [ $i = 0 ] || cat "$outputs/$name"
    i=$((i + 1))
done
exit $rc
