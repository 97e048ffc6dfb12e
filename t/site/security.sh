# flux-sdexec site harness: users, munge and the IMP (sourced by t/site/site.sh after lib.sh).

SITE_MUNGE_DIR=/var/lib/sdexec-site/munge  # the harness's munge key and seed (owned by munge)
SITE_MUNGE_SOCKET=/run/munge/munge.socket.2 # the default socket every munge client uses

# users_up: the instance owner `flux` (a system user, home /var/lib/flux as flux.service's
# StateDirectory) and the guests (ordinary users; the first also in a supplementary group).
# guest_job_tmpdirs_down: remove the job shells' temporary folders (/tmp/jobtmp-RANK-JOBID)
# that the guests' jobs left (a job whose shell or broker a test kills leaves its own). Job
# ids start over in every new instance, so a later run can give another guest's job the same
# folder, and its shell fails ("files: chdir /tmp/jobtmp-0-...: Permission denied").
guest_job_tmpdirs_down() {
    for _g in $SITE_GUESTS; do
        id "$_g" >/dev/null 2>&1 || continue
        find /tmp -maxdepth 1 -name 'jobtmp-*' -user "$_g" -exec rm -rf {} +
    done
}

users_up() {
    getent group "$SITE_GUEST_GROUP" >/dev/null || groupadd "$SITE_GUEST_GROUP" || return 1
    if ! id "$SITE_USER" >/dev/null 2>&1; then
        useradd --system --user-group --home-dir /var/lib/flux --create-home \
            --shell /usr/sbin/nologin "$SITE_USER" || return 1
    fi
    _first=yes
    for _g in $SITE_GUESTS; do
        if ! id "$_g" >/dev/null 2>&1; then
            useradd --user-group --create-home --shell /bin/sh "$_g" || return 1
        fi
        if [ $_first = yes ]; then
            usermod -a -G "$SITE_GUEST_GROUP" "$_g" || return 1
            _first=no
        fi
    done
}

munge_answers() {
    munge -n 2>/dev/null | unmunge >/dev/null 2>&1
}

# munge_up: munged with a key the harness made, on the default socket, as user munge; its pid
# in munged.pid. A munged the harness did not start (one already answering) is used as it is.
munge_up() {
    if site_pid munged >/dev/null; then
        munge_answers && return 0
        site_die "munged (pid $(site_pid munged)) does not answer on $SITE_MUNGE_SOCKET"
    fi
    if munge_answers; then
        site_say "using the munged already answering on $SITE_MUNGE_SOCKET (not ours: left alone)"
        return 0
    fi
    install -d -o munge -g munge -m 0700 "$SITE_MUNGE_DIR" &&
        install -d -o munge -g munge -m 0755 /run/munge || return 1
    if [ ! -s "$SITE_MUNGE_DIR/munge.key" ]; then
        mungekey --create --keyfile="$SITE_MUNGE_DIR/munge.key" &&
            chown munge:munge "$SITE_MUNGE_DIR/munge.key" &&
            chmod 0600 "$SITE_MUNGE_DIR/munge.key" || return 1
    fi
    setpriv --reuid=munge --regid=munge --clear-groups \
        munged --foreground --key-file="$SITE_MUNGE_DIR/munge.key" \
        --seed-file="$SITE_MUNGE_DIR/munged.seed" --log-file="$SITE_MUNGE_DIR/munged.log" \
        --pid-file="$SITE_MUNGE_DIR/munged.pid" --socket="$SITE_MUNGE_SOCKET" \
        </dev/null >/dev/null 2>&1 &
    site_record munged $!
    site_wait_until 10 munge_answers ||
        site_die "munged did not answer within 10 s (log: $SITE_MUNGE_DIR/munged.log)"
}

munge_down() {
    site_stop_pid munged
}

# imp_up: the IMP setuid root, its config (the flux user may exec the installed flux-shell) and
# flux-security's signing config (munge), as flux-core's admin guide shows. Files and their
# directories root-owned and not writable by others: the IMP checks that.
imp_up() {
    _imp=$(site_libexec flux-imp)
    [ -x "$_imp" ] || site_die "no IMP at $_imp (make flux-security, then make flux-core)"
    chown root:root "$_imp" && chmod 4755 "$_imp" || return 1
    install -d -m 0755 "$SITE_IMP_CONF" "$SITE_SIGN_CONF" || return 1
    imp_config "$(site_libexec flux-shell)" >"$SITE_IMP_CONF/imp.toml" &&
        chmod 0644 "$SITE_IMP_CONF/imp.toml" || return 1
    cat >"$SITE_SIGN_CONF/sign.toml" <<-EOF || return 1
	# written by flux-sdexec's t/site/site.sh: job requests signed with munge
	[sign]
	max-ttl = 1209600  # 2 weeks
	default-type = "munge"
	allowed-types = [ "munge" ]
	EOF
    chmod 0644 "$SITE_SIGN_CONF/sign.toml"
}

# imp_config SHELL: the IMP config allowing the flux user to run SHELL.
imp_config() {
    cat <<-EOF
	# written by flux-sdexec's t/site/site.sh (flux-core admin guide, "Configuring the IMP")
	[exec]
	allowed-users = [ "$SITE_USER" ]
	allowed-shells = [ "$1" ]
	EOF
}
