#!/bin/sh
# The v2 tier, inside the guest (`make check-v2`: scripts/vm/check-v2.sh boots two guests and
# gives each some of the parts): the host every site runs, systemd as pid 1 on unified cgroup
# v2. In order:
#
#   1. flux-core's own suites against our modules, under root's user manager
#      (user@0.service, started by systemd, every controller delegated);
#   2. our sharness tests whose verdicts depend on the cgroup layout or on systemd's version:
#      containment and kernel limits, and usage (t0031, t0032: read from the slice on systemd
#      252, from the unit on 257); t0033 (a 64-rank job's record within 1 s of its last
#      shell's exit) runs on this machine only: under TCG 64 brokers take minutes to gather;
#   3. the production instance (t/v2/t03*.t): flux-core's flux.service, the flux user's
#      user@<uid>.service, the real IMP and munge, guests' jobs, `systemctl restart flux`.
#
# Every part runs whatever an earlier one did; the exit status is 1 when any failed. Each
# suite's counts are printed. V2_PARTS (default "upstream ours production") picks parts;
# V2_UPSTREAM_SUITES and V2_OURS narrow parts 1 and 2.
set -u
cd "$(dirname "$0")/../.." || exit 1
src=$PWD
export SDEXEC_WAIT_TIMEOUT=${SDEXEC_WAIT_TIMEOUT:-180}  # TCG: CPU-bound work is 10-15x slower
export FLUX_TEST_TIMEOUT=${FLUX_TEST_TIMEOUT:-600}
# Logs go to the checkout, a folder per release; sharness's trash directories to the guest's
# own disk: the checkout is shared with the host, whose tiers run the same scripts meanwhile
# (scripts/vm/prebuild.sh boots a guest during them), and with the other release's guests.
# Python's bytecode too: a guest's .pyc written through 9p was once read by the host's
# Python half written (EOFError: marshal data too short, its broker down at the module's load).
results=$src/t/v2/results/$(. /etc/os-release && echo "$VERSION_CODENAME")
trash=/var/tmp/v2-trash
export PYTHONPYCACHEPREFIX=/var/tmp/v2-pycache
mkdir -p "$results" "$trash"
say() { echo "v2: $*"; }
failed=

part_upstream() {
    # t2416 took over 900 s on a Debian 13 guest beside another guest and a loaded host. At a
    # suite's end, rank 0's shutdown under TCG beside another guest once took over the 20 s flux
    # start gives it once rank 1 has exited (t2411, exit 137, with no sdexec loaded by then):
    # FLUX_TEST_WRAP, which flux-core's test_under_flux passes to flux start, gives it 120.
    FLUX_TEST_WRAP=--test-exit-timeout=120 \
    UPSTREAM_TIMEOUT=${UPSTREAM_TIMEOUT:-1800} UPSTREAM_RESULTS=$results/upstream \
        UPSTREAM_SUITES="${V2_UPSTREAM_SUITES:-t2409-sdexec
        t2410-sdexec-memlimit t2411-sdexec-job t2412-sdmon t2413-sdmon-resource
        t2416-sdexec-constrain-resources t2421-sdexec-bg}" scripts/check-upstream.sh
}

# suites DIR SCRIPT...: run each sharness SCRIPT of DIR verbosely, its log in results/,
# and print its counts and time, the tests that failed and the first failure; 1 when any failed.
suites() {
    _dir=$1 _rc=0
    shift
    for _t in "$@"; do
        _log=$results/${_t%.t}.log
        _start=$(date +%s)
        (cd "$_dir" && timeout -k 10 1200 "./$_t" -v --root="$trash") >"$_log" 2>&1
        _trc=$?
        _took="$(($(date +%s) - _start)) s"
        _pass=$(grep -c -E '^ok [0-9]+' "$_log")
        _skip=$(grep -c -E '^ok [0-9]+ # skip' "$_log")
        _fail=$(grep -c -E '^not ok [0-9]+' "$_log")
        _all=$(sed -n 's/^1\.\.0 # SKIP[[:space:]]*//p' "$_log")
        if [ -n "$_all" ]; then
            echo "${_t%.t}: SKIPPED: $_all ($_took)"
        else
            echo "${_t%.t}: $((_pass - _skip)) passed, $_fail failed, $_skip skipped ($_took)"
        fi
        if [ $_trc -ne 0 ] || [ "$_fail" -ne 0 ]; then
            _rc=1
            grep -E '^not ok [0-9]+' "$_log" | sed 's/^/    /'
            echo "    (exit $_trc; log: $_log); the first failure:"
            scripts/first-failure.sh "$_log" "$trash/trash directory.${_t%.t}/broker.log"
        fi
    done
    return $_rc
}

part_ours() {
    suites t ${V2_OURS:-t0011-sdexec-mapper.t t0013-sdexec-containment-check.t
        t0016-sdexec-kernel-limits.t t0045-sdexec-containment-v2.t t0031-sdexec-usage.t
        t0032-sdexec-usage-tree.t}
}

part_production() {
    suites t/v2 t0301-v2-flux-service.t
}

say "Debian $(cat /etc/debian_version), $(uname -sr)," \
    "$(systemctl --version | head -1) as pid 1, /sys/fs/cgroup is $(stat -fc %T /sys/fs/cgroup)," \
    "controllers: $(cat /sys/fs/cgroup/cgroup.controllers), $(nproc) CPUs, clocksource" \
    "$(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
loginctl enable-linger root && systemctl start user@0.service || exit 1
export XDG_RUNTIME_DIR=/run/user/0 DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/0/bus
say "user@0.service delegates: $(systemctl show -p DelegateControllers --value user@0.service)"
for part in ${V2_PARTS:-upstream ours production}; do
    say "== $part"
    start=$(date +%s)
    part_$part || failed="$failed $part"
    say "$part took $(($(date +%s) - start)) s"
done
[ -z "$failed" ] || { say "FAILED:$failed"; exit 1; }
say "all parts passed"
