#!/bin/bash
# scripts/vm/run.sh [--share PATH]... [--timeout S] [--smp N] [--tcg-thread MODE] -- COMMAND...
#
# Boot the v2 guest (scripts/vm/build.sh) on a throw-away copy-on-write layer of its image, run
# COMMAND there as root (sh -c semantics: one string, or a command and its arguments) in the
# host's current directory, print its output as it comes, and exit with its exit status. The
# image itself never changes: every run starts from the same fresh guest, and whatever a run
# leaves in the guest (users, units, cgroups) goes with its layer.
#
#   --share PATH   a host folder mounted in the guest at the same path (9p, read-write): the
#                  current directory always is; libtool wrappers in flux-core's build tree
#                  hold absolute paths, so it is shared where it is too. Mounted with
#                  cache=loose: the guest keeps what it has read and written in its own page
#                  and dentry caches, so the host must not change a shared folder while the
#                  guest runs (a run's checkout and the build tree are not changed; two
#                  guests sharing a tree write different files). Uncached, a `flux start
#                  --test-size=2 true` from the build tree took 38.6 s in a guest, 24 s with
#                  the cache, 23 s from a copy in the guest's memory
#   --timeout S    power the guest off after S seconds (default 1500) and fail with 124
#   --smp N        virtual CPUs (default VM_SMP, else 3: flux-core's t2416 runs its MULTICORE
#                  tests only with more than 2 cores)
#   --tcg-thread MODE  multi (default, qemu's): a host thread per virtual CPU; single: one
#                  host thread runs them all in turn. With more host threads than cores,
#                  multi was two to three times slower: two guests of 3 and 2 virtual CPUs
#                  on two cores ran flux-core's t2409 in 265 s each with multi, 90 s with
#                  single; an hour later 293-301 s and 148-155 s (likely a virtual CPU
#                  spinning on a lock whose holder's thread waits for a core: TCG has no
#                  paravirtual spinlocks). scripts/vm/check-v2.sh passes single
#
# Environment: V2_RELEASE (bookworm, the default, or trixie) and VM_DIR (the image, default
# /var/tmp/flux-sdexec/v2vm, v2vm-trixie for trixie: scripts/vm/release-lib.sh), VM_MEM (MiB,
# default 6144), CI (passed to COMMAND). The guest's console goes to VM_DIR/console-<pid>.log, kept
# when the run fails. Runs under TCG: /dev/kvm on these machines hangs a stock guest kernel
# at its first instruction (seen with and without -cpu host).
set -uo pipefail
# shellcheck source=scripts/vm/release-lib.sh
. "$(dirname "$0")/release-lib.sh"
die() { echo "vm: $*" >&2; exit 1; }
shares=("$PWD") timeout=1500 smp=${VM_SMP:-3} tcg_thread=multi
while [ $# -gt 0 ]; do
    case $1 in
    --share) shares+=("$(cd "$2" && pwd)") || die "--share $2: no such folder"; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --smp) smp=$2; shift 2 ;;
    --tcg-thread) tcg_thread=$2; shift 2 ;;
    --) shift; break ;;
    *) die "usage: scripts/vm/run.sh [--share PATH]... [--timeout S] [--smp N] [--tcg-thread single|multi] -- COMMAND..." ;;
    esac
done
case $tcg_thread in single | multi) ;; *) die "--tcg-thread $tcg_thread: not single or multi" ;; esac
[ $# -gt 0 ] || die "no command"
[ -f "$VM_DIR/disk.img" ] || die "no image in $VM_DIR: make vm V2_RELEASE=$v2_release"
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 is not installed (make deps)"

ctl=$(mktemp -d "$VM_DIR/run.XXXXXX") || exit 1
console=$VM_DIR/console-$$.log
qemu_pid=
cleanup() {
    [ -z "$qemu_pid" ] || kill "$qemu_pid" 2>/dev/null
    rm -rf "$ctl"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

quote() { printf "'%s' " "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }
{
    echo "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8"
    [ -z "${CI:-}" ] || echo "export CI=$(quote "$CI")"
    i=0
    for s in "${shares[@]}"; do
        echo "mkdir -p $(quote "$s") && mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=loose s$i $(quote "$s") || exit 1"
        i=$((i + 1))
    done
    echo "cd $(quote "$PWD") || exit 1"
    if [ $# -eq 1 ]; then
        echo "$1"
    else
        for a in "$@"; do quote "$a"; done
        echo
    fi
} >"$ctl/cmd.sh"
: >"$ctl/out.log"

qemu-img create -q -f qcow2 -b "$VM_DIR/disk.img" -F raw "$ctl/layer.qcow2" || die "qemu-img failed"
virtfs=(-virtfs "local,path=$ctl,mount_tag=ctl,security_model=none")
i=0
for s in "${shares[@]}"; do
    virtfs+=(-virtfs "local,path=$s,mount_tag=s$i,security_model=none")
    i=$((i + 1))
done
timeout -k 10 "$timeout" qemu-system-x86_64 -accel "tcg,thread=$tcg_thread" -smp "$smp" -m "${VM_MEM:-6144}" \
    -display none -monitor none -serial "file:$console" -nic none -no-reboot \
    -kernel "$VM_DIR/vmlinuz" -initrd "$VM_DIR/initrd.img" \
    -append "root=/dev/vda rw console=ttyS0 quiet" \
    -drive "file=$ctl/layer.qcow2,format=qcow2,if=virtio" "${virtfs[@]}" &
qemu_pid=$!
tail -n +1 -f --pid="$qemu_pid" "$ctl/out.log" &
tail_pid=$!
wait "$qemu_pid"
qemu_rc=$?
qemu_pid=
wait "$tail_pid" 2>/dev/null
if [ -f "$ctl/rc" ]; then
    rc=$(cat "$ctl/rc")
    [ "$rc" = 0 ] && rm -f "$console"
    exit "$rc"
fi
if [ "$qemu_rc" = 124 ]; then
    echo "vm: timed out after $timeout s; the guest's console: $console" >&2
else
    echo "vm: the guest ended (qemu exit $qemu_rc) with no exit status; its console: $console" >&2
fi
tail -20 "$console" >&2
exit 124
