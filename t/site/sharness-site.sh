# flux-sdexec: shared setup of the site tests (t/site/t*.t), run as root against the instance
# `make site-up` started (t/site/site.sh): every flux command runs as the flux user (`owner`)
# or as a guest (`guest1`, `guest2`), each with its own uid, groups and home.

SHARNESS=${SHARNESS:-/usr/share/sharness/sharness.sh}
if ! test -r "$SHARNESS"; then
    echo "1..0 # SKIP sharness is not installed ($SHARNESS)"
    exit 0
fi
. "$SHARNESS"
. "$SHARNESS_TEST_SRCDIR/../lib/test-debug.sh"

SITE_ENV=${SITE_ENV:-/run/sdexec-site/env}
if ! test -r "$SITE_ENV"; then
    skip_all="the site is not up (make site-up, as root)"
    test_done
fi
. "$SITE_ENV"
G1=${SITE_GUESTS%% *}
G2=${SITE_GUESTS##* }
T=${SITE_WAIT_TIMEOUT:-60}

owner() {
    as_user "$SITE_USER" "$@"
}
guest1() {
    as_user "$G1" "$@"
}
guest2() {
    as_user "$G2" "$@"
}
# as_guest N CMD...: guest1 or guest2.
as_guest() {
    _n=$1
    shift
    guest$_n "$@"
}
# user_systemctl ARGS: the flux user's manager.
user_systemctl() {
    owner systemctl --user "$@"
}

# site_wait_until_t CMD...: CMD every 0.2 s until it succeeds, at most $T seconds; says
# what it waited for when it gives up.
site_wait_until_t() {
    site_wait_until "$T" "$@" || {
        echo >&2 "timed out waiting for: $*"
        return 1
    }
}

# shell_units_of ID: every unit of the flux manager that holds a job shell of job ID (bulk-exec
# names them imp-shell-<rank>-<jobid>.service, bgexec imp-shell-<rank>-<jobid>-<rank>:sys.service).
shell_units_of() {
    _f58=$(owner flux job id --to=f58plain "$1")
    user_systemctl list-units --all --plain --no-legend "imp-shell-*-$_f58*.service" |
        awk '{print $1}'
}
# keepers_of ID: the keeper slices of those units (imp\x2dshell\x2d<rank>\x2d<jobid>...slice,
# where the brokers share the manager: systemd/keepers.py).
keepers_of() {
    _f58=$(owner flux job id --to=f58plain "$1")
    user_systemctl list-units --all --plain --no-legend "imp?x2dshell?x2d*$_f58*.slice" |
        awk '{print $1}'
}
no_shell_units_of() {
    test -z "$(shell_units_of "$1")$(keepers_of "$1")"
}
# shell_units_left: every job shell unit of the flux manager (none once the jobs are done).
shell_units_left() {
    user_systemctl list-units --all --plain --no-legend "imp-shell-*" "shell-*" \
        "imp?x2dshell*" "shell?x2d*" |
        awk '{print $1}'
}
no_shell_units_left() {
    test -z "$(shell_units_left)"
}
# guest_procs USER: the live processes of USER in this site's cgroup subtree (other instances
# on this machine may run the same users; zombies, which pid 1 here reaps late, aside).
guest_procs() {
    _sub=$(site_cgroup unified)
    for _p in $(ps -u "$1" -o pid=,stat= | awk '$2 !~ /^Z/ {print $1}'); do
        _cg=$(sed -n 's/^0:://p' /proc/$_p/cgroup 2>/dev/null)
        case /sys/fs/cgroup/unified$_cg in
        "$_sub"/*) echo "$_p $(cat /proc/$_p/comm 2>/dev/null) $_cg" ;;
        esac
    done
}
no_guest_procs() {
    for _g in $SITE_GUESTS; do
        test -z "$(guest_procs "$_g")" || return 1
    done
}
# drained: the ranks drained now (nothing when none).
drained() {
    owner flux resource drain -n -o "{ranks}"
}

# check_mix: every job of mix.codes ("GUEST ID CODE" lines) is inactive with its own exit
# code and no exception.
check_mix() {
	while read g id code; do
		as_guest $g flux job wait-event -q -t $T $id clean &&
		test_expect_code $code as_guest $g flux job status $id &&
		as_guest $g flux job eventlog $id >$id.eventlog &&
		! grep exception $id.eventlog || { cat $id.eventlog; return 1; }
	done <mix.codes
}
# running N: at least N jobs of any user are running.
running() {
	test "$(owner flux jobs -A -f running -n -o "{id}" | wc -l)" -ge "$1"
}
# site_set_config NAME [TOML]: replace $SITE_CONF/zz-test-NAME.toml (no TOML: remove it),
# `flux config reload` as the flux user, and wait until every rank has the new config.
site_set_config() {
    if test $# -gt 1; then
        printf "%s\n" "$2" >"$SITE_CONF/zz-test-$1.toml"
    else
        rm -f "$SITE_CONF/zz-test-$1.toml"
    fi &&
        owner flux config reload &&
        owner flux config get | jq -S . >config.want &&
        site_wait_until_t site_ranks_config_is config.want
}
site_ranks_config_is() {
    for _r in $(seq 1 $((SITE_SIZE - 1))); do
        owner flux exec -r $_r flux config get | jq -S . | cmp -s - "$1" || return 1
    done
}
# site_reset_config: remove every zz-test-*.toml, reload (test cleanup).
site_reset_config() {
    rm -f "$SITE_CONF"/zz-test-*.toml
    owner flux config reload
}
# site_method METHOD: job-exec launches new jobs with METHOD (bulk-exec or bgexec).
site_method() {
    site_set_config method "[exec]
method = \"$1\"" &&
        owner flux module stats job-exec | jq -e ".method == \"$1\"" >/dev/null
}

# leaves_nothing: after every test file, no job shell unit and no guest process is left, and
# no rank is drained.
test_site_leaves_nothing() {
    test_expect_success 'no job shell unit, no guest process left, no rank drained' '
        site_wait_until_t no_shell_units_left &&
        site_wait_until_t no_guest_procs &&
        test -z "$(drained)"
    '
}
