# flux-sdexec's v2 tier: a site's system instance in the guest, set up as flux-core's admin
# guide lays it out and started by flux-core's own flux.service (sourced by t/v2/t03*.t, as
# root in the guest, after sharness).
#
#   prod_install   make install of this checkout (a guest-local copy), as a site does
#   prod_site      users (flux, two guests), munge, the IMP (setuid, configured), the instance's
#                  config in /usr/local/etc/flux/system/conf.d (flux.service's --config-path)
#   prod_start     systemctl start flux; wait until rank 0 is up for jobs (sdmon: no
#                  monitor-force-up here, systemd is pid 1)
#   as_flux CMD, as_guest USER CMD   a command as the instance owner / a guest, on the instance
#   flux_units     the units in the flux user's manager that belong to the instance

PROD_PREFIX=/usr/local
PROD_LIBEXEC=$PROD_PREFIX/libexec/flux
PROD_CONF=$PROD_PREFIX/etc/flux/system/conf.d
PROD_IMP_CONF=/etc/flux/imp/conf.d
PROD_SIGN_CONF=/etc/flux/security/conf.d
PROD_URI=local:///run/flux/local
PROD_GUESTS="fluxguest1 fluxguest2"
PROD_SHELL=$PROD_PREFIX/libexec/flux-sdexec/flux-shell-reconnect
PROD_TIMEOUT=${PROD_TIMEOUT:-300}  # seconds: a broker start under TCG takes tens of them

flux_uid() {
    id -u flux
}
as_flux() {
    runuser -u flux -- env FLUX_URI=$PROD_URI XDG_RUNTIME_DIR=/run/user/$(flux_uid) \
        DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/$(flux_uid)/bus "$@"
}
as_guest() {
    _g=$1
    shift
    runuser -u "$_g" -- env FLUX_URI=$PROD_URI "$@"
}

# flux_units: the instance's units (job shells: bulk-exec names its IMP units itself, without
# the instance part; their accounting slices; the guard) in the flux user's manager, a line
# each.
flux_units() {
    as_flux systemctl --user list-units --all --plain --no-legend \
        '*:sys.service' 'imp-shell-*' 'shell-*' 'app-sdexec-*' 'sdexec-guard-*' | awk '{print $1}'
}

# wait_until SECONDS COMMAND...: poll COMMAND every half second until it succeeds; bounded.
wait_until() {
    _w_n=$(($1 * 2))
    shift
    while ! "$@" >/dev/null 2>&1; do
        _w_n=$((_w_n - 1))
        test $_w_n -gt 0 || { echo "gave up waiting for: $*" >&2; return 1; }
        sleep 0.5
    done
}

prod_install() {
    rm -rf /var/tmp/flux-sdexec-src &&
    mkdir -p /var/tmp/flux-sdexec-src &&
    # without what tests write (the host's tiers may be running in this checkout meanwhile)
    (cd "$SDEXEC_SRCDIR" && tar -cf - --exclude=./.git --exclude=./build --exclude=./t/v2/results \
        --exclude='*trash*' --exclude='*test-results' --exclude='*test-logs' \
        --exclude=./t/upstream-results --exclude='__pycache__' .) |
        tar -xf - -C /var/tmp/flux-sdexec-src &&
    # offline, as a site without a package index: setuptools from Debian, no isolation
    PIP_NO_BUILD_ISOLATION=0 PIP_NO_INDEX=1 make -C /var/tmp/flux-sdexec-src install \
        PREFIX=$PROD_PREFIX >/var/tmp/flux-sdexec-install.log 2>&1 || {
        tail -20 /var/tmp/flux-sdexec-install.log >&2
        return 1
    }
}

prod_users() {
    id flux >/dev/null 2>&1 ||
        useradd --system --user-group --home-dir /var/lib/flux --shell /usr/sbin/nologin flux ||
        return 1
    for _g in $PROD_GUESTS; do
        id "$_g" >/dev/null 2>&1 || useradd --user-group --create-home --shell /bin/sh "$_g" ||
            return 1
    done
}

prod_imp() {
    chown root:root $PROD_LIBEXEC/flux-imp && chmod 4755 $PROD_LIBEXEC/flux-imp &&
    install -d -m 0755 $PROD_IMP_CONF $PROD_SIGN_CONF &&
    cat >$PROD_IMP_CONF/imp.toml <<-EOF &&
	# the flux user may run the job shell as any guest (flux-core admin guide)
	[exec]
	allowed-users = [ "flux" ]
	allowed-shells = [ "$PROD_LIBEXEC/flux-shell", "$PROD_SHELL" ]
	EOF
    cat >$PROD_SIGN_CONF/sign.toml <<-EOF
	[sign]
	max-ttl = 1209600
	default-type = "munge"
	allowed-types = [ "munge" ]
	EOF
}

# prod_config [EXTRA-TOML]: sdexec.toml as make install ships it, and the site's system.toml
# (EXTRA-TOML, from stdin when "-", appended to it).
prod_config() {
    install -d -m 0755 $PROD_CONF &&
    cp /var/tmp/flux-sdexec-src/conf.d/sdexec.toml $PROD_CONF/sdexec.toml &&
    cat >$PROD_CONF/system.toml <<-EOF
	[access]
	allow-guest-user = true
	allow-root-owner = true

	[exec]
	imp = "$PROD_LIBEXEC/flux-imp"
	service = "sdexec"
	EOF
    test "$1" != - || cat >>$PROD_CONF/system.toml
}

prod_site() {
    prod_users && prod_imp &&
    systemctl enable --now munge >/dev/null 2>&1 &&
    wait_until 30 sh -c 'munge -n | unmunge'
}

# rank 0 answers and is up for jobs
prod_ready() {
    as_flux flux resource status -s avail -no '{ranks}' | grep -qx 0
}
prod_start() {
    systemctl start flux &&
    wait_until $PROD_TIMEOUT prod_ready || {
        journalctl -u flux --no-pager | tail -30 >&2
        return 1
    }
}
