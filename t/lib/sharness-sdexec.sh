# flux-sdexec: shared setup for the sharness tests of the flux tier (t/tNNNN-*.t).
#
# A test script sets test_description, sources this file and calls
# sdexec_extra_config FILE: on the first run (outside Flux), TOML from stdin becomes
# FILE in the config directory beside the rendered sdexec.toml (for tables that
# sdexec.toml does not define, such as [exec]); on the second run it is ignored.
sdexec_extra_config() {
    if test -z "$SDEXEC_UNDER_FLUX"; then
        mkdir -p "$SHARNESS_TRASH_DIRECTORY/conf" &&
        cat >"$SHARNESS_TRASH_DIRECTORY/conf/$1"
    else
        cat >/dev/null
    fi
}

# sdexec_under_flux SIZE, which runs the rest of the script inside
# `flux start --test-size=SIZE` with a config directory rendered from our
# conf.d/sdexec.toml, so rc1 loads sdbus and *our* sdexec exactly as a site
# would. Usage:
#
#     test_description='...'
#     . "$(dirname "$0")/lib/sharness-sdexec.sh"
#     sdexec_under_flux 2
#
# The script is run twice: the first run (outside Flux) checks prerequisites,
# renders the config into its trash directory and re-executes the script
# under `flux start`; the second run (SDEXEC_UNDER_FLUX set) runs the tests.
# Its trash directory lives inside the first one's, which keeps the config
# directory alive for `flux config reload` and is removed when all passed.

SHARNESS=${SHARNESS:-/usr/share/sharness/sharness.sh}
if ! test -r "$SHARNESS"; then
    echo "1..0 # SKIP sharness is not installed ($SHARNESS)"
    exit 0
fi
. "$SHARNESS"

# The repository root, whatever directory prove was started from.
SDEXEC_SRCDIR=$(cd "$SHARNESS_TEST_SRCDIR/.." && pwd)
. "$SDEXEC_SRCDIR/t/lib/test-debug.sh"
SDEXEC_MODULE=$SDEXEC_SRCDIR/flux_sdexec/modules/sdexec.py
SDEXEC_MAPPER_MODULE=$SDEXEC_SRCDIR/flux_sdexec/modules/sdexec-mapper.py
SDEXEC_CONF_TEMPLATE=$SDEXEC_SRCDIR/conf.d/sdexec.toml
export SDEXEC_SRCDIR SDEXEC_MODULE SDEXEC_MAPPER_MODULE

# Client commands used throughout.
sdexec="flux exec --service sdexec"
sproc_wait="flux sproc wait --service sdexec"
sproc_kill="flux sproc kill --service sdexec"
sproc_ps="flux sproc ps --service sdexec"

# Seconds any bounded wait below may take before it gives up. (Shell functions
# have no local variables: the helpers below use only _sdexec_* names.)
SDEXEC_WAIT_TIMEOUT=${SDEXEC_WAIT_TIMEOUT:-30}

# skip_all, with one line saying why, when this tier cannot run here.
sdexec_check_prereqs() {
    if ! command -v flux >/dev/null 2>&1; then
        skip_all="flux-core is not installed (no flux on PATH)"
        test_done
    fi
    # systemctl --user and pystemd find the user instance through these.
    : "${XDG_RUNTIME_DIR:=/run/user/$(id -u)}"
    : "${DBUS_SESSION_BUS_ADDRESS:=unix:path=$XDG_RUNTIME_DIR/bus}"
    export XDG_RUNTIME_DIR DBUS_SESSION_BUS_ADDRESS
    if ! systemctl --user show --property=Version >/dev/null 2>&1 ||
        ! busctl --user status >/dev/null 2>&1; then
        skip_all="systemd user instance not reachable on $DBUS_SESSION_BUS_ADDRESS"
        skip_all="$skip_all (start one: eval \"\$(t/start-user-systemd.sh)\")"
        test_done
    fi
}

# sdexec_render_config DIR [jobs]
# Copy conf.d/sdexec.toml to DIR with sdexec.module and sdexec-mapper.module
# pointing at this checkout's modules; nothing else in it changes. With "jobs",
# add a separate file that forces resources up: this container has no system bus, so sdmon (loaded
# because systemd.enable = true) never puts ranks online and jobs never run.
sdexec_render_config() {
    mkdir -p "$1" &&
    sed -e "s|^sdexec\.module *=.*|sdexec.module = \"$SDEXEC_MODULE\"|" \
        -e "s|^sdexec-mapper\.module *=.*|sdexec-mapper.module = \"$SDEXEC_MAPPER_MODULE\"|" \
        "$SDEXEC_CONF_TEMPLATE" >"$1/sdexec.toml" &&
    grep -q "^sdexec.module = \"$SDEXEC_MODULE\"$" "$1/sdexec.toml" &&
    grep -q "^sdexec-mapper.module = \"$SDEXEC_MAPPER_MODULE\"$" "$1/sdexec.toml" || {
        echo >&2 "could not render $SDEXEC_CONF_TEMPLATE into $1"
        return 1
    }
    if test "$2" = jobs; then
        cat >"$1/test-resources.toml" <<-EOF
	# test only: no system bus in the test container, so sdmon never
	# reports ranks online; let the resource module consider them up.
	[modules]
	resource.args = ["monitor-force-up"]
	EOF
    fi
}

# sdexec_bgexec_jobs_under_flux SIZE: sdexec_under_flux SIZE jobs, job-exec running job
# shells through sdexec by bgexec, with the job helpers of sharness-jobs.sh.
sdexec_bgexec_jobs_under_flux() {
    sdexec_extra_config exec.toml <<-EOF
	[exec]
	service = "sdexec"
	method = "bgexec"
	EOF
    sdexec_under_flux "$1" jobs &&
    . "$SDEXEC_SRCDIR/t/lib/sharness-jobs.sh"
}

# sdexec_under_flux SIZE [jobs] [-- flux-start options]
# First run: re-execute this script under flux start with our config.
# Second run: remember the instance name and schedule the cleanup.
sdexec_under_flux() {
    _sdexec_size=$1
    shift
    _sdexec_jobs=
    if test "$1" = jobs; then
        _sdexec_jobs=jobs
        shift
    fi
    test "$1" = "--" && shift
    if test -n "$SDEXEC_UNDER_FLUX"; then
        # The instance part the design gives this test instance, and the one
        # our module announced at load; the final leftover check covers both.
        SDEXEC_INSTANCE=t$(flux getattr broker.uuid | tr -d - | cut -c1-8)
        SDEXEC_LOGGED_INSTANCE=$(flux dmesg | sed -n \
            "s/.*sdexec\.info\[0\]: units named <label>:\(.*\)\.service (glob .*/\1/p" |
            tail -n 1)
        # what `flux config reload` re-reads, and what nested instances use
        SDEXEC_CONF_DIR=$SDEXEC_OUTER_TRASH/conf
        test "$debug" = t || cleanup "rm -rf \"$SDEXEC_OUTER_TRASH\""
        return 0
    fi
    sdexec_check_prereqs
    _sdexec_conf=$SHARNESS_TRASH_DIRECTORY/conf
    sdexec_render_config "$_sdexec_conf" $_sdexec_jobs || error "cannot render the config"
    _sdexec_flags=
    test "$verbose" = t && _sdexec_flags="$_sdexec_flags --verbose"
    test "$debug" = t && _sdexec_flags="$_sdexec_flags --debug"
    test "$immediate" = t && _sdexec_flags="$_sdexec_flags --immediate"
    test "$chain_lint" = t && _sdexec_flags="$_sdexec_flags --chain-lint"
    cd "$SHARNESS_TEST_DIRECTORY" || error "cannot cd to $SHARNESS_TEST_DIRECTORY"
    # Test this checkout even if another copy of flux_sdexec is installed.
    PYTHONPATH=$SDEXEC_SRCDIR${PYTHONPATH:+:$PYTHONPATH}
    SDEXEC_UNDER_FLUX=$_sdexec_size
    SDEXEC_OUTER_TRASH=$SHARNESS_TRASH_DIRECTORY
    export PYTHONPATH SDEXEC_UNDER_FLUX SDEXEC_OUTER_TRASH
    # Broker messages go to a file (kept on failure), not to the TAP stream.
    exec flux start --test-size="$_sdexec_size" --config-path="$_sdexec_conf" \
        -Slog-filename="$SHARNESS_TRASH_DIRECTORY/broker.log" \
        -Slog-stderr-level=1 "$@" \
        sh "$0" $_sdexec_flags --root="$SHARNESS_TRASH_DIRECTORY"
}

# sdexec_wait_until CMD...: run CMD every 0.1s until it succeeds, at most
# SDEXEC_WAIT_TIMEOUT seconds. Fails (saying what it waited for) on timeout.
sdexec_wait_until() {
    _sdexec_n=$((SDEXEC_WAIT_TIMEOUT * 10))
    while ! "$@"; do
        _sdexec_n=$((_sdexec_n - 1))
        if test $_sdexec_n -le 0; then
            echo >&2 "timed out waiting for: $*"
            return 1
        fi
        sleep 0.1
    done
}

# sdexec_set_config NAME [TOML]: replace conf file zz-NAME.toml of this instance (no TOML:
# remove it), `flux config reload`, and wait until rank 1 has the new config (followers
# take it asynchronously). Fails if the reload fails.
sdexec_set_config() {
    if test $# -gt 1; then
        printf "%s\n" "$2" >"$SDEXEC_CONF_DIR/zz-$1.toml"
    else
        rm -f "$SDEXEC_CONF_DIR/zz-$1.toml"
    fi &&
        flux config reload &&
        flux config get | jq -S . >config.want &&
        sdexec_wait_until sdexec_rank1_config_is config.want
}
sdexec_rank1_config_is() {
    flux exec -r 1 flux config get | jq -S . | cmp -s - "$1"
}

# sdexec_wait_for_file FILE: wait until FILE exists and is not empty.
sdexec_wait_for_file() {
    sdexec_wait_until test -s "$1"
}

# sdexec_unit_gone UNIT: systemd no longer runs UNIT (inactive, or unloaded).
sdexec_unit_gone() {
    case $(systemctl --user is-active "$1" 2>/dev/null) in
    inactive | unknown) return 0 ;;
    esac
    return 1
}

# sdexec_wait_unit_gone UNIT
sdexec_wait_unit_gone() {
    sdexec_wait_until sdexec_unit_gone "$1"
}

# sdexec_unit_state UNIT: print ActiveState of UNIT.
sdexec_unit_state() {
    systemctl --user is-active "$1" 2>/dev/null
}

# sdexec_unit_is UNIT STATE: ActiveState of UNIT is STATE (for sdexec_wait_until).
sdexec_unit_is() {
    test "$(sdexec_unit_state "$1")" = "$2"
}

# sdexec_list_units GLOB: every loaded unit matching GLOB, one name a line.
sdexec_list_units() {
    systemctl --user list-units --all --plain --no-legend "$1" | awk '{print $1}'
}

# sdexec_dmesg_has PATTERN: the broker ring buffer has a line matching PATTERN
# (a grep basic regex).
sdexec_dmesg_has() {
    flux dmesg | grep -q -- "$1"
}

# sdexec_check_no_units [INSTANCE]: no unit of the instance is left (waiting a
# bounded time for the last units to be reaped); print the leftovers if any.
# Without an argument: this test instance, by its expected name and by the
# name our module logged at load (should they differ).
sdexec_no_units_left() {
    # a systemctl that fails (the manager reexecuting) lists nothing: that is no answer
    # (keeper slices, systemd/keepers.py, are named after their units)
    _sdexec_units=$(systemctl --user list-units --all --plain --no-legend \
        "*:${1:-$SDEXEC_INSTANCE}.service" "*:${1:-$SDEXEC_INSTANCE}.slice") &&
        test -z "$_sdexec_units"
}
sdexec_check_no_units() {
    set -- ${1:-$SDEXEC_INSTANCE ${SDEXEC_LOGGED_INSTANCE:-$SDEXEC_INSTANCE}}
    for _sdexec_inst in "$@"; do
        if ! sdexec_wait_until sdexec_no_units_left "$_sdexec_inst"; then
            systemctl --user list-units --all --plain --no-legend \
                "*:$_sdexec_inst.service" "*:$_sdexec_inst.slice" >&2
            return 1
        fi
    done
}
