# The v2 guest's Debian release and where its files live (sourced by build.sh, run.sh and
# check-v2.sh, before scripts/build-lib.sh).
#
#   V2_RELEASE  the guest's Debian release: bookworm (the default) or trixie
#   VM_DIR      its image (default /var/tmp/flux-sdexec/v2vm for bookworm, v2vm-<release> else)
#
# A release other than this machine's own has flux-security and flux-core built for it in a
# build root of that release (V2_BUILD_ROOT, default /var/tmp/flux-sdexec/<release>-root, made
# with mmdebstrap), by the project's own `make flux-security flux-core`; flux-core's build tree
# is kept in /var/tmp/flux-sdexec/<release>-builds, the same path on this machine, in the build
# root and in the guest (libtool's wrappers hold absolute paths). FLUX_CORE_BUILD names only a
# tree of this machine's release: for another one it is not used.
v2_release=${V2_RELEASE:-bookworm}
case $v2_release in
bookworm) VM_DIR=${VM_DIR:-/var/tmp/flux-sdexec/v2vm} ;;
trixie) VM_DIR=${VM_DIR:-/var/tmp/flux-sdexec/v2vm-$v2_release} ;;
*) echo "vm: V2_RELEASE=$v2_release: not bookworm or trixie" >&2; exit 1 ;;
esac
host_release=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
v2_build_root=
if [ "$v2_release" != "$host_release" ]; then
    v2_build_root=${V2_BUILD_ROOT:-/var/tmp/flux-sdexec/$v2_release-root}
    export SDEXEC_BUILDS=/var/tmp/flux-sdexec/$v2_release-builds
    unset FLUX_CORE_BUILD
fi

# v2_sources FILE: this machine's apt sources with its release's name replaced by the guest's,
# written to FILE (deb822 or one-line; the same mirrors, no mirror named here).
v2_sources() {
    local sources=/etc/apt/sources.list.d/debian.sources
    [ -f "$sources" ] || sources=/etc/apt/sources.list
    sed "s/\b$host_release\b/$v2_release/g" "$sources" >"$1"
}

# in_build_root PATH... -- COMMAND...: run COMMAND as root in the build root, in a private mount
# namespace where /proc, /sys, /dev and each PATH (at the same path) are mounted; the mounts go
# with the namespace when COMMAND ends.
in_build_root() {
    local binds=()
    while [ "$1" != -- ]; do
        binds+=("$1")
        shift
    done
    shift
    unshare -m --propagation private bash -c '
        root=$1
        shift
        mount -t proc proc "$root/proc" && mount --rbind /sys "$root/sys" &&
            mount --rbind /dev "$root/dev" || exit 1
        while [ "$1" != -- ]; do
            mkdir -p "$root$1" && mount --bind "$1" "$root$1" || exit 1
            shift
        done
        shift
        exec chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 \
            PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
    ' in_build_root "$v2_build_root" "${binds[@]}" -- "$@"
}
