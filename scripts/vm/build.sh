#!/bin/bash
# scripts/vm/build.sh: build, or refresh, the v2 guest image of a Debian release (`make vm`).
#
# The guest is the host every site runs: Debian 12 (bookworm, the default) or 13 (trixie:
# systemd 257, Linux 6.12) booting systemd as pid 1 on the unified cgroup v2 hierarchy, every
# controller delegated to user managers (a `Delegate=yes` drop-in for user@.service, as sites
# set it for sdexec). Made from Debian's packages only (mmdebstrap, from this machine's own apt
# sources with its release's name replaced by the guest's; the kernel from linux-image-amd64),
# with flux-security and flux-core installed from the same release tarballs as `make
# flux-security flux-core`: flux-core from the build tree `make flux-core` keeps (make
# install DESTDIR=...), flux-security built once more from its tarball (about 30 s). The
# runtime libraries both link against are found with ldd and installed as Debian packages.
# For a release other than this machine's, both are built in a build root of that release
# (scripts/vm/release-lib.sh): the project's `make flux-security flux-core` there, then the
# same staging.
#
# The image is rebuilt only when an input changes: this script, scripts/vm/release-lib.sh,
# scripts/vm/packages, scripts/vm/guest/* and the two tarballs' sha256 (its inputs' hash is in
# VM_DIR/stamp). `--force` rebuilds anyway; `--inputs` prints the hash and exits; `--why-not`
# prints, on one line, why this machine cannot build and run the guest and what to run (nothing
# when it can). With no flux-core build tree it first builds one from the flux-core tarball
# (scripts/setup.sh flux-tree: `make flux-core`, which installs nothing; in the build root for
# another release); no tree and no tarball is a why-not. (`--stage DIR` is its own step run in
# the build root: flux-security and flux-core installed into DIR/stage, the Debian packages of
# their runtime libraries listed in DIR/runtime.)
#
#   V2_RELEASE       bookworm (default) or trixie; V2_BUILD_ROOT (scripts/vm/release-lib.sh)
#   VM_DIR           where the image lives (default /var/tmp/flux-sdexec/v2vm, for trixie
#                    v2vm-trixie): disk.img (a sparse 6 GB ext4), vmlinuz, initrd.img, stamp,
#                    build.log
#   FLUX_CORE_BUILD  flux-core's build tree (default: the newest `make flux-core` kept)
#   SETUP_UID, SETUP_DEBIAN  stand in for `id -u` and the system in tests (as scripts/setup.sh's)
#
# Needs root, mmdebstrap and Debian's apt sources (make deps installs mmdebstrap and qemu).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
here=$top/scripts/vm
# shellcheck source=scripts/vm/release-lib.sh
. "$here/release-lib.sh"
say() { echo "vm: $*"; }
die() { echo "vm: $*" >&2; exit 1; }

force=
case ${1:-} in
--force) force=1 ;;
--inputs | --why-not | --stage | "") ;;
*) die "usage: scripts/vm/build.sh [--force|--inputs|--why-not]" ;;
esac

# shellcheck source=scripts/build-lib.sh
. "$top/scripts/build-lib.sh"
security_tarball=$("$top/scripts/tarball.sh" flux-security 2>/dev/null) || security_tarball=
core_build=$(flux_core_build)

# stage DIR: flux-security built from its tarball and flux-core from its build tree installed
# into DIR/stage, and the Debian packages holding the libraries their ELF files need listed in
# DIR/runtime (in the build root for another release: the packages of that release).
stage() {
    local stage=$1/stage
    mkdir -p "$stage" "$1/security"
    tar -xzf "$security_tarball" -C "$1/security"
    (
        cd "$1"/security/*/ &&
            ./configure --prefix=/usr/local --sysconfdir=/etc --enable-pam --disable-docs &&
            make -j"$(nproc)" && make install DESTDIR="$stage"
    ) || die "flux-security from $(basename "$security_tarball") failed"
    make -C "$core_build" install DESTDIR="$stage" || die "flux-core from $core_build failed"
    command -v file >/dev/null ||
        apt-get install -y -q --no-install-recommends file || die "file (to find ELF files) failed"
    local elf
    elf=$(find "$stage" -type f \( -perm -u+x -o -name '*.so*' \) -exec file {} + |
        sed -n 's/^\([^:]*\):.*ELF.*dynamically linked.*/\1/p')
    # ldd fails on some files (a plugin missing its host's symbols): the rest still count.
    for f in $elf; do ldd "$f" 2>/dev/null || true; done |
        awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
        while read -r lib; do
            dpkg -S "$(readlink -f "$lib")" 2>/dev/null || dpkg -S "$lib" 2>/dev/null || true
        done | cut -d: -f1 | sort -u >"$1/runtime"
}
if [ "${1:-}" = --stage ]; then
    stage "$2"
    exit 0
fi

why_not() {  # why this machine cannot build and boot the guest and what to run, or nothing
    [ "${SETUP_UID:-$(id -u)}" = 0 ] ||
        { echo "not root (mmdebstrap, chroot and mkfs need root): run make check-v2 as root"; return; }
    command -v apt-get >/dev/null && [ -f "${SETUP_DEBIAN:-/etc/debian_version}" ] ||
        { echo "not Debian (the guest is made from this machine's Debian apt sources)"; return; }
    for cmd in mmdebstrap qemu-system-x86_64 qemu-img file; do
        command -v $cmd >/dev/null || { echo "$cmd is not installed: run make deps"; return; }
    done
    [ -n "$security_tarball" ] || {
        echo "no flux-security tarball (scripts/tarball.sh flux-security says why):" \
            "run make check-v2 FLUX_SECURITY_TARBALL=<flux-security release tarball>"
        return
    }
    # No build tree is built first (below), from the tarball scripts/tarball.sh finds.
    flux_core_built "$core_build" || "$top/scripts/tarball.sh" --dry-run flux-core >/dev/null 2>&1 ||
        echo "$(flux_core_no_build) and no flux-core tarball to build one" \
            "(scripts/tarball.sh flux-core says why): run make flux-core FLUX_CORE_TARBALL=<tarball>"
}
if [ "${1:-}" = --why-not ]; then
    why_not
    exit 0
fi
why=$(why_not)
[ -z "$why" ] || die "cannot build the guest here: $why"
# One build of an image at a time (make check's background build, a make vm); a build that
# is stopped removes its work directory (the EXIT trap below).
trap 'exit 143' TERM INT
mkdir -p "$(dirname "$VM_DIR")"
exec 8>>"$VM_DIR.lock"
flock -n 8 || { say "waiting for another build of $VM_DIR"; flock 8; }

# in_release PATH... -- COMMAND...: COMMAND for the guest's release, with PATHs reachable: here,
# or in the build root (of which all but COMMAND's output goes to the build root's log).
in_release() {
    if [ -z "$v2_build_root" ]; then
        while [ "$1" != -- ]; do shift; done
        "${@:2}"
    else
        in_build_root "$@"
    fi
}
core_tarball=$("$top/scripts/tarball.sh" --dry-run flux-core 2>/dev/null) || core_tarball=
# make flux-security flux-core in the build root, as on a new machine of that release: its build
# tree in SDEXEC_BUILDS, the same path there as here.
build_in_root() {
    local log=$v2_build_root.log
    mkdir -p "$SDEXEC_BUILDS"
    if [ ! -x "$v2_build_root/usr/bin/make" ]; then
        local sources
        sources=$(mktemp)
        v2_sources "$sources"
        say "making the $v2_release build root $v2_build_root (mmdebstrap; log: $log)"
        # made aside, then renamed: a root cut short is never taken for a made one
        rm -rf "$v2_build_root.new"
        mmdebstrap --variant=minbase --include=make,ca-certificates,file "$v2_release" \
            "$v2_build_root.new" "$sources" >"$log" 2>&1 || { rm -f "$sources"; tail -20 "$log" >&2; return 1; }
        rm -f "$sources"
        rm -rf "$v2_build_root" && mv "$v2_build_root.new" "$v2_build_root" || return 1
    fi
    say "make flux-security flux-core in $v2_build_root (a few minutes; log: $log)"
    # a build stopped while apt ran there (make check's background build) left dpkg half done
    in_build_root -- dpkg --configure -a >>"$log" 2>&1 || { tail -30 "$log" >&2; return 1; }
    "$top/scripts/tarball.sh" flux-core >/dev/null || return 1
    in_build_root "$top" "$(dirname "$security_tarball")" "$(dirname "$core_tarball")" "$SDEXEC_BUILDS" -- \
        env SDEXEC_BUILDS="$SDEXEC_BUILDS" FLUX_SECURITY_TARBALL="$security_tarball" \
        FLUX_CORE_TARBALL="$core_tarball" nice -n 19 make -C "$top" --no-print-directory \
        flux-security flux-core >>"$log" 2>&1 || { tail -30 "$log" >&2; return 1; }
}
if ! flux_core_built "$core_build"; then
    [ "${1:-}" != --inputs ] || die "$(flux_core_no_build): run make flux-core"
    if [ -n "$v2_build_root" ]; then
        build_in_root || die "flux-core for $v2_release could not be built in $v2_build_root (above)"
    else
        "$top/scripts/setup.sh" flux-tree || die "$(flux_core_no_build), and it could not be built (above)"
    fi
    core_build=$(flux_core_build)
    flux_core_built "$core_build" || die "no flux-core build tree was left in $(flux_core_no_build)"
fi

inputs() {  # the hash of everything the image is made from
    {
        echo "$v2_release"
        cat "$here/build.sh" "$here/release-lib.sh" "$here/packages" "$here"/guest/*
        sha256sum <"$security_tarball"
        basename "$core_build"
        cat "$core_build/.flux-sdexec-built"  # the tarball's sha256 (scripts/flux-core.sh)
    } | sha256sum | cut -d' ' -f1
}

if [ "${1:-}" = --inputs ]; then
    inputs
    exit 0
fi
want=$(inputs)
if [ -z "$force" ] && [ -f "$VM_DIR/disk.img" ] && [ "$(cat "$VM_DIR/stamp" 2>/dev/null)" = "$want" ]; then
    say "the $v2_release image in $VM_DIR is up to date"
    exit 0
fi

mkdir -p "$VM_DIR"
work=$(mktemp -d "$VM_DIR/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
log=$VM_DIR/build.log
: >"$log"
start=$SECONDS
step() {  # step WHAT COMMAND...: run it, its output to the log; on failure show the log's end
    local started=$SECONDS
    "${@:2}" >>"$log" 2>&1 || { tail -30 "$log" >&2; die "$1 failed (log: $log)"; }
    say "$1: $((SECONDS - started)) s"
}
root=$work/root
mkdir -p "$root"

step "flux-security from $(basename "$security_tarball"), flux-core from $core_build" \
    in_release "$top" "$work" "$core_build" "$(dirname "$security_tarball")" -- \
    env V2_RELEASE="$v2_release" FLUX_CORE_BUILD="$core_build" FLUX_SECURITY_TARBALL="$security_tarball" \
    nice -n 19 "$here/build.sh" --stage "$work"
runtime=$(tr '\n' ' ' <"$work/runtime")
packages="$(sed 's/#.*//' "$here/packages" | tr -s ' \n' ' ') $runtime"
say "runtime libraries: $runtime"

# The root filesystem from the machine's own apt sources, the release's name replaced.
v2_sources "$work/sources"
step "mmdebstrap $v2_release (about 90 s)" mmdebstrap --variant=minbase \
    --include="$(echo $packages | tr ' ' ',')" "$v2_release" "$root" "$work/sources"

configure_guest() {
    cp -a "$work/stage"/. "$root"/
    chroot "$root" ldconfig
    chown root:root "$root/usr/local/libexec/flux/flux-imp"
    chmod 4755 "$root/usr/local/libexec/flux/flux-imp"
    echo v2guest >"$root/etc/hostname"
    printf '127.0.0.1 localhost\n127.0.1.1 v2guest\n' >"$root/etc/hosts"
    printf '/dev/vda / ext4 rw 0 1\n' >"$root/etc/fstab"
    # Every controller delegated to user managers, as sites set it for sdexec.
    mkdir -p "$root/etc/systemd/system/user@.service.d"
    printf '[Service]\nDelegate=yes\n' >"$root/etc/systemd/system/user@.service.d/delegate.conf"
    # Nothing periodic fires during a run (no network: apt's timers would only fail).
    for timer in apt-daily.timer apt-daily-upgrade.timer man-db.timer e2scrub_all.timer \
        fstrim.timer dpkg-db-backup.timer; do
        ln -sf /dev/null "$root/etc/systemd/system/$timer"
    done
    install -m 0755 "$here/guest/hostrun" "$root/usr/local/sbin/hostrun"
    install -m 0644 "$here/guest/hostrun.service" "$root/etc/systemd/system/hostrun.service"
    chroot "$root" systemctl enable hostrun.service
    chroot "$root" passwd -d root
    cp "$root"/boot/vmlinuz-* "$work/vmlinuz"
    cp "$root"/boot/initrd.img-* "$work/initrd.img"
    truncate -s 6G "$work/disk.img"
    mkfs.ext4 -q -d "$root" "$work/disk.img"
}
step "configure the guest, make its disk" configure_guest
mv -f "$work/disk.img" "$work/vmlinuz" "$work/initrd.img" "$VM_DIR"/
echo "$want" >"$VM_DIR/stamp"
say "built $VM_DIR/disk.img in $((SECONDS - start)) s"
