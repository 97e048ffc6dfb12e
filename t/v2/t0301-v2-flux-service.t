#!/bin/sh
test_description='the production instance on the host every site runs

As root in the v2 guest (systemd as pid 1, unified cgroup v2): make install of this
checkout, the flux user, two guests, munge and the real IMP, and the system instance
started by flux-core'"'"'s own flux.service (User=flux; its user@<uid>.service started by
systemd with every controller delegated), sdmon loaded as rc1 loads it (no
monitor-force-up). The guests'"'"' jobs run under their uids in imp-shell units of the flux
user'"'"'s manager, each in its cgroup v2 with its limits, by bulk-exec and by bgexec; then
`systemctl restart flux` under 10 running guest jobs: the broker restarts, sdexec adopts the
job shells, every job completes with its own exit code, and no unit is left.'

SHARNESS=${SHARNESS:-/usr/share/sharness/sharness.sh}
test -r "$SHARNESS" || { echo "1..0 # SKIP sharness is not installed"; exit 0; }
. "$SHARNESS"
SDEXEC_SRCDIR=$(cd "$SHARNESS_TEST_SRCDIR/../.." && pwd)
. "$SDEXEC_SRCDIR/t/v2/production.sh"

if test "$(id -u)" != 0 || test "$(ps -o comm= -p 1)" != systemd ||
	test "$(stat -fc %T /sys/fs/cgroup)" != cgroup2fs; then
	skip_all="needs root on a host booting systemd on unified cgroup v2 (the v2 guest: make check-v2)"
	test_done
fi

# jobs_done N: no job active, N inactive
jobs_done() {
	test "$(as_flux flux jobs -A -no {id} | wc -l)" -eq 0 &&
	test "$(as_flux flux jobs -A -a -no {id} | wc -l)" -eq "$1"
}
# running_recoverable ID...: each job's shells passed their barriers (bgexec's
# `recoverable`): what a reattach after a restart needs
running_recoverable() {
	for _id in "$@"; do
		as_flux flux job wait-event -q -t 1 -p exec "$_id" recoverable || return 1
	done
}

test_expect_success 'make install, as a site does' '
	prod_install &&
	test -f $PROD_PREFIX/libexec/flux-sdexec/sdexec.py &&
	test -x $PROD_SHELL &&
	grep -x "exec '"'"'$PROD_LIBEXEC/flux-shell'"'"' --reconnect \"\$@\"" $PROD_SHELL
'
# The reconnecting shell is in the IMP's allowed-shells: it and each directory above it are
# root's and not group- or other-writable (review 3 #13).
test_expect_success 'the installed flux-shell-reconnect and its directories are root'"'"'s alone' '
	p=$PROD_SHELL &&
	while :; do
		test "$(stat -c %U "$p")" = root &&
		test $((0$(stat -c %a "$p") & 022)) = 0 || { echo "$p: $(stat -c "%U %a" "$p")"; return 1; }
		test "$p" = / && break
		p=$(dirname "$p")
	done
'
test_expect_success 'the site: users, munge, the IMP, the instance config (bulk-exec, containment)' '
	prod_site &&
	prod_config - <<-EOF
	sdexec-constrain-resources = true
	sdexec-properties = { MemoryMax = "800M" }
	EOF
'
test_expect_success 'systemctl start flux: the broker runs as flux beside its systemd user manager' '
	prod_start &&
	test "$(ps -o user= -p $(systemctl show -p MainPID --value flux))" = flux &&
	systemctl is-active user@$(flux_uid).service &&
	systemctl show -p DelegateControllers --value user@$(flux_uid).service >delegated.out &&
	for c in cpu cpuset io memory pids; do grep -w $c delegated.out || return 1; done
'
test_expect_success 'rc1 loaded our sdexec and sdexec-mapper, and sdmon (resources up without force-up)' '
	as_flux flux module stats sdexec | jq -r .module >module.out &&
	grep -x "$PROD_PREFIX/libexec/flux-sdexec/sdexec.py" module.out &&
	as_flux flux module list >modules.out &&
	grep "^sdmon " modules.out && grep "^sdexec-mapper " modules.out &&
	! grep -r monitor-force-up $PROD_CONF
'
test_expect_success 'flux sdexec status as the flux user: ok, unified, the device policy named' '
	as_flux flux sdexec status >status.out &&
	test_debug "cat status.out" &&
	grep "^ok .* unified .*enforce" status.out &&
	grep "DevicePolicy" status.out
'
# guest_job GUEST: a job of GUEST printing its uid, its unit and its memory limit
guest_job() {
	as_guest $1 flux run --input=/dev/null -n1 -c1 sh -c \
		"id -u; cg=\$(sed -n s/^0:://p /proc/self/cgroup); echo \$cg;
		 while test \$cg != / && ! test -f /sys/fs/cgroup\$cg/memory.max; do cg=\${cg%/*}; done;
		 cat /sys/fs/cgroup\$cg/memory.max /sys/fs/cgroup\$cg/cpuset.cpus.effective"
}
test_expect_success 'bulk-exec: each guest runs under its uid in an imp-shell unit of flux, with its limits' '
	for g in $PROD_GUESTS; do
		guest_job $g >$g.out || return 1
		test_debug "cat $g.out"
		test "$(sed -n 1p $g.out)" = "$(id -u $g)" || return 1
		sed -n 2p $g.out | grep "/user@$(flux_uid).service/app.slice/.*/imp-shell-0-f[^/]*\.service$" ||
			return 1
		test "$(sed -n 3p $g.out)" -gt 0 && test "$(sed -n 3p $g.out)" -le $((800 << 20)) ||
			return 1
		test -n "$(sed -n 4p $g.out)" || return 1
	done
'
test_expect_success 'a guest job over its MemoryMax is OOM-killed, the job exception says so' '
	test_expect_code 137 as_guest fluxguest2 flux run --input=/dev/null -n1 -c1 \
		python3 -c "b = bytearray(900 << 20)" 2>oom.err &&
	test_debug "cat oom.err" &&
	grep "job.exception .* type=oom .* killed by the OOM killer, MemoryMax=" oom.err
'
test_expect_success 'the owner'"'"'s own job runs without a device policy, and its eventlog says so' '
	id=$(as_flux flux submit --input=/dev/null -n1 -c1 true) &&
	as_flux flux job wait-event -t $PROD_TIMEOUT $id clean &&
	test "$(as_flux flux job status $id; echo $?)" = 0 &&
	as_flux flux job eventlog $id >owner.eventlog &&
	test_debug "cat owner.eventlog" &&
	grep "^[0-9.]* memo .*DevicePolicy.*systemd#23198" owner.eventlog
'
test_expect_success 'device policies required: the owner'"'"'s job fails naming it, a guest'"'"'s runs (the IMP applies it)' '
	printf "[sdexec]\ncontainment-required = [\"DevicePolicy\"]\n" >$PROD_CONF/zz-required.toml &&
	as_flux flux config reload &&
	id=$(as_flux flux submit --input=/dev/null -n1 -c1 true) &&
	as_flux flux job wait-event -t $PROD_TIMEOUT $id clean &&
	as_flux flux job eventlog $id >required.eventlog &&
	test_debug "cat required.eventlog" &&
	grep "exception.*DevicePolicy not enforced: unified: systemd" required.eventlog &&
	as_flux flux resource undrain 0 &&
	as_guest fluxguest1 flux run --input=/dev/null -n1 -c1 true &&
	rm $PROD_CONF/zz-required.toml &&
	as_flux flux config reload
'
test_expect_success 'bgexec: restart flux with the new method, jobs of both guests run' '
	cat >>$PROD_CONF/system.toml <<-EOF &&
	method = "bgexec"
	job-shell = "$PROD_SHELL"
	EOF
	mkdir -p /etc/systemd/system/flux.service.d &&
	printf "[Service]\nEnvironment=FLUX_DISABLE_JOB_CLEANUP=1\n" \
		>/etc/systemd/system/flux.service.d/restart.conf &&
	systemctl daemon-reload &&
	systemctl restart flux &&
	wait_until $PROD_TIMEOUT prod_ready &&
	as_flux flux module stats job-exec | jq -e ".method // .config.method // empty" >method.out;
	for g in $PROD_GUESTS; do
		guest_job $g >$g.bg.out || return 1
		test "$(sed -n 1p $g.bg.out)" = "$(id -u $g)" || return 1
	done
'
test_expect_success 'systemctl restart flux under 10 running guest jobs: each ends with its own exit code' '
	as_flux flux jobs -A -a -no {id} | wc -l >before.count &&
	ids= &&
	for k in 1 2 3 4 5 6 7 8 9 10; do
		g=fluxguest$((k % 2 + 1)) &&
		id=$(as_guest $g flux submit --input=/dev/null -n1 \
			sh -c "sleep 60; exit $k") &&
		echo "$id $k" >>expected.out &&
		ids="$ids $id" || return 1
	done &&
	wait_until $PROD_TIMEOUT running_recoverable $ids &&
	t0=$(date +%s) &&
	systemctl restart flux &&
	wait_until $PROD_TIMEOUT prod_ready &&
	echo "restart: the instance was back $(($(date +%s) - t0)) s after systemctl restart flux" &&
	wait_until $PROD_TIMEOUT jobs_done $(($(cat before.count) + 10)) &&
	echo "restart: all 10 jobs done $(($(date +%s) - t0)) s after it" &&
	while read id k; do
		as_flux flux jobs -no "{id} {returncode}" $id || return 1
	done <expected.out >got.out &&
	cat got.out &&
	while read id k; do
		echo "$(as_flux flux job id --to=f58 $id) $k"
	done <expected.out >want.out &&
	test_cmp want.out got.out
'
test_expect_success 'no unit of the instance is left in the flux user manager' '
	wait_until 60 sh -c "test -z \"\$(. $SDEXEC_SRCDIR/t/v2/production.sh; flux_units)\"" || {
		flux_units
		false
	}
'
test_expect_success 'systemctl stop flux: nothing of the instance left running' '
	systemctl stop flux &&
	test -z "$(flux_units)"
'
test_done
