# flux-sdexec site harness: the system instance owned by the flux user (sourced by
# t/site/site.sh after lib.sh).
#
# flux.service's broker options, with SITE_SIZE brokers on this node started by `flux start
# --test-size` (PMI bootstrap instead of a [bootstrap] table naming one host per broker):
# -Sbroker.sd-notify=1 makes it the system instance (our units are named <label>-<rank>:sys),
# --config-path is the production config directory.

# instance_config: the system instance's config in $SITE_CONF, as flux-core's admin guide lays
# it out, sdexec.toml rendered from conf.d/sdexec.toml to load this checkout's modules.
instance_config() {
    install -d -m 0755 "$SITE_CONF" || return 1
    sed -e "s|^sdexec\.module *=.*|sdexec.module = \"$SITE_SRCDIR/flux_sdexec/modules/sdexec.py\"|" \
        -e "s|^sdexec-mapper\.module *=.*|sdexec-mapper.module = \"$SITE_SRCDIR/flux_sdexec/modules/sdexec-mapper.py\"|" \
        "$SITE_SRCDIR/conf.d/sdexec.toml" >"$SITE_CONF/sdexec.toml" || return 1
    cat >"$SITE_CONF/system.toml" <<-EOF
	# written by flux-sdexec's t/site/site.sh (flux-core admin guide, "Configuring the Flux
	# System Instance"); sdexec.toml beside it loads this checkout's modules.
	[exec]
	imp = "$(site_libexec flux-imp)"
	service = "sdexec"
	sdexec-constrain-resources = true

	[sdexec]
	# this host is hybrid: AllowedCPUs is never enforced there, so "enforce" would fail
	# every job; the site tests switch to "enforce" to see that
	containment-check = "warn"

	[access]
	allow-guest-user = true
	allow-root-owner = true

	# no system bus on this machine: sdmon never reports ranks online
	[modules]
	resource.args = ["monitor-force-up"]
	EOF
}

instance_answers() {
    as_user "$SITE_USER" timeout 10 flux uptime >/dev/null 2>&1
}
instance_ready() {
    _up=$(as_user "$SITE_USER" timeout 10 flux resource status -s avail -no '{ranks}' 2>/dev/null)
    [ "$_up" = "0-$((SITE_SIZE - 1))" ]
}

instance_up() {
    if site_pid instance >/dev/null; then
        instance_answers && return 0
        site_die "the instance (flux start pid $(site_pid instance)) does not answer"
    fi
    install -d -o "$SITE_USER" -g "$(id -g "$SITE_USER")" -m 0755 "$SITE_RUNDIR" || return 1
    _log=$(site_home "$SITE_USER")/broker.log
    (as_user_exec "$SITE_USER" setsid flux start --test-size="$SITE_SIZE" \
        --test-rundir="$SITE_RUNDIR" --config-path="$SITE_CONF" \
        -Sbroker.rc2_none -Sbroker.sd-notify=1 -Sbroker.module-nopanic=1 \
        -Slog-filename="$_log" -Slog-stderr-level=3 -Sbroker.quorum="$SITE_SIZE" \
        >>"$SITE_STATE/instance.log" 2>&1 </dev/null) &
    site_record instance $!
    site_wait_until "$SITE_TIMEOUT" instance_answers &&
        site_wait_until "$SITE_TIMEOUT" instance_ready || {
        tail -n 30 "$SITE_STATE/instance.log" >&2
        site_die "the instance did not come up within $SITE_TIMEOUT s"
    }
    for _r in $(seq 0 $((SITE_SIZE - 1))); do
        _bp=$(as_user "$SITE_USER" flux exec -r $_r flux getattr broker.pid) &&
            site_record broker-$_r "$_bp" || site_die "no pid of broker $_r"
    done
}

# instance_down: `flux shutdown` as the flux user, then the pids the harness recorded (flux
# start, each broker) are waited for, and signalled only if still there.
instance_down() {
    if site_pid instance >/dev/null && instance_answers; then
        as_user "$SITE_USER" timeout "$SITE_TIMEOUT" flux shutdown --quiet >/dev/null 2>&1 ||
            site_say "flux shutdown failed"
        site_wait_until "$SITE_TIMEOUT" site_pid_gone "$(site_pid instance)" || true
    fi
    site_stop_pid instance 30
    for _r in $(seq 0 $((SITE_SIZE - 1))); do
        site_stop_pid broker-$_r 30
    done
    rm -rf "$SITE_RUNDIR"
}
