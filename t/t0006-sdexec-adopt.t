#!/bin/sh
test_description='a restarted sdexec adopts the units its crashed predecessor left behind'

. "$(dirname "$0")/lib/sharness-sdexec.sh"

sdexec_check_prereqs
module=$SDEXEC_MODULE

# render_conf DIR: conf.d/sdexec.toml for this checkout (jobs can run), plus TOML from stdin
render_conf() {
	sdexec_render_config "$1" jobs &&
	cat >"$1/extra.toml"
}

# run_instance SIZE CONFDIR SCRIPT: SCRIPT runs as the initial program; a module
# that dies must not take the broker with it (broker.module-nopanic)
run_instance() {
	flux start --test-size="$1" --config-path="$2" \
		-Sbroker.module-nopanic=1 sh -ex "$3"
}

# Helpers for the scenario scripts (sourced by them).
cat >lib.sh <<'EOS'
wait_until() {  # wait_until CMD...: run CMD every 0.1s until it succeeds, at most 30s
	n=0; while ! "$@"; do
		n=$((n+1)); test $n -lt 300 || { echo "timed out waiting for: $*" >&2; return 1; }
		sleep 0.1
	done
}
sdexec_unloaded() {
	! flux module list | grep -q "^sdexec "
}
ps_has() {  # ps_has RANK PATTERN: flux sproc ps of sdexec on RANK shows PATTERN
	flux sproc ps -s sdexec -r "$1" | grep -q "$2"
}
module_pid() {  # pid of sdexec's module process on this broker
	pgrep -P "$(flux getattr broker.pid)" -f 'sdexec\.py$'
}
crash_sdexec() {
	kill -9 "$(module_pid)"
	wait_until sdexec_unloaded
}
instance() {
	flux dmesg | sed -n "s/.*units named <label>:\([^.]*\)\.service.*/\1/p" | head -1
}
units() {
	systemctl --user list-units --all --plain --no-legend "*:$1.service" | awk '{print $1}'
}
collect() {  # collect RANK TARGET: wait once, status to TARGET.status; a 2nd wait must fail
	rc=0; flux sproc wait -s sdexec -r $1 $2 || rc=$?
	echo $rc >$2.status
	! flux sproc wait -s sdexec -r $1 $2 2>/dev/null
}
EOS
. ./lib.sh

test_expect_success 'config for a 2-broker instance' '
	render_conf conf </dev/null
'

test_expect_success 'running and finished units are adopted with their state and status' '
	cat >adopt.sh <<-EOT &&
	. ./lib.sh
	flux exec --service sdexec -r 0 --bg --waitable --label=done sh -c "exit 3"
	flux exec --service sdexec -r 0 --bg --waitable --label=fifo sh -c "cat fifo; exit 6"
	flux exec --service sdexec -r 0 --bg --waitable sh -c "cat fifo2; exit 7" >uuid.pid
	flux exec --service sdexec -r 1 --bg --waitable --label=other sh -c "cat fifo3; exit 8"
	wait_until ps_has 0 "Z  done"
	crash_sdexec
	flux module load $module
	flux sproc ps -s sdexec -r 0 >ps.out
	flux sproc ps -s sdexec -r 1 >ps1.out
	flux dmesg | grep "adopted" >adopted.out
	echo go >fifo
	collect 0 done
	collect 0 fifo
	echo go >fifo2
	collect 0 \$(cut -d" " -f2 uuid.pid)
	echo go >fifo3
	collect 1 other
	instance >instance.out
	flux exec -r all flux module remove sdexec
	EOT
	mkfifo fifo fifo2 fifo3 &&
	run_instance 2 conf adopt.sh &&
	grep "^ *[0-9]* Z  done  *sh" ps.out &&
	grep "^ *[0-9]* R  fifo  *sh" ps.out &&
	grep "^ *$(cut -d" " -f2 uuid.pid) R  -  *sh" ps.out &&
	! grep other ps.out &&
	grep "^ *[0-9]* R  other" ps1.out &&
	test $(wc -l <adopted.out) -eq 3 &&
	echo 3 >expect.done && test_cmp expect.done done.status &&
	echo 6 >expect.fifo && test_cmp expect.fifo fifo.status &&
	echo 7 >expect.uuid && test_cmp expect.uuid $(cut -d" " -f2 uuid.pid).status &&
	echo 8 >expect.other && test_cmp expect.other other.status &&
	test -z "$(units $(cat instance.out))"
'

test_expect_success 'kill and wait by label after adoption; another instance is untouched' '
	cat >other.sh <<-EOT &&
	. ./lib.sh
	flux exec --service sdexec -r 0 --bg --waitable --label=b sh -c "while ! test -e bgate; do sleep 0.05; done; exit 9"
	flux dmesg | sed -n "s/.*units named <label>:\\([^.]*\\)\\.service.*/\\1/p" >b.instance
	wait_until test -e b.go
	flux sproc ps -s sdexec -r 0 >b.ps
	touch bgate
	rc=0; flux sproc wait -s sdexec -r 0 b || rc=\$?; echo \$rc >b.status
	EOT
	cat >kill.sh <<-EOT &&
	. ./lib.sh
	flux start --test-size=1 --config-path=conf sh -e other.sh &
	flux exec --service sdexec -r 0 --bg --waitable --label=k sleep 300
	wait_until test -s b.instance
	crash_sdexec
	flux module load $module
	flux sproc kill -s sdexec -r 0 9 k
	collect 0 k
	touch b.go
	wait
	EOT
	run_instance 2 conf kill.sh &&
	echo 137 >expect.k && test_cmp expect.k k.status &&
	grep "R  b " b.ps &&
	echo 9 >expect.b && test_cmp expect.b b.status &&
	test -z "$(units $(cat b.instance))"
'

test_expect_success 'stress: 20 waitable processes, 3 crashes while they run and exit' '
	cat >stress.sh <<-EOT &&
	. ./lib.sh
	for i in \$(seq 1 20); do
		g=\$((i % 4 + 1))
		flux exec --service sdexec -r 0 --bg --waitable --label=s\$i \\
			sh -c "while ! test -e gate\$g; do sleep 0.05; done; exit \$i" >/dev/null
	done
	for round in 1 2 3; do
		touch gate\$round
		crash_sdexec
		flux module load $module
	done
	touch gate4
	for i in \$(seq 1 20); do collect 0 s\$i; done
	instance >instance.out
	flux module remove sdexec
	EOT
	run_instance 1 conf stress.sh &&
	for i in $(seq 1 20); do echo $i >expect.$i; test_cmp expect.$i s$i.status || return 1; done &&
	test -z "$(units $(cat instance.out))"
'

test_expect_success 'bgexec job survives job-exec reload with an sdexec crash in between' '
	render_conf conf-bgexec <<-EOT &&
	[exec]
	service = "sdexec"
	method = "bgexec"
	EOT
	cat >job.sh <<-EOT &&
	. ./lib.sh
	id=\$(flux submit -N1 --requires=rank:0 sh -c "while ! test -e jgate; do sleep 0.05; done; exit 3")
	flux job wait-event -t 30 \$id start
	flux module remove job-exec
	crash_sdexec
	flux module load $module
	flux module load job-exec
	touch jgate
	flux job wait-event -t 30 \$id clean
	flux job status \$id || echo \$? >job.status
	flux job eventlog \$id >job.eventlog
	instance >instance.out
	EOT
	run_instance 2 conf-bgexec job.sh &&
	echo 3 >expect.job && test_cmp expect.job job.status &&
	! grep exception job.eventlog &&
	test -z "$(units $(cat instance.out))"
'

# As job-exec runs a multi-user shell: SIGTERM to the main process only, no stop timeout of
# systemd's, and sdexec's stop timer ending in SIGUSR1 (the IMP kills the whole job on it).
test_expect_success 'a unit handed over keeps its stop timer: its stop signal reaches it' '
	cat >stoptimer.sh <<-EOT &&
	. ./lib.sh
	flux exec --service sdexec -r 0 --bg --waitable --label=st \\
		--setopt=SDEXEC_PROP_KillMode=process \\
		--setopt=SDEXEC_PROP_TimeoutStopUSec=infinity \\
		--setopt=SDEXEC_STOP_TIMER_SEC=1 --setopt=SDEXEC_STOP_TIMER_SIGNAL=10 \\
		sh -c "trap \\"\\" TERM; trap \\"touch usr1; exit 0\\" USR1; while :; do sleep 0.1; done"
	wait_until ps_has 0 "R  st"
	flux module reload $module
	flux dmesg | grep "adopted st" >st.adopted
	systemctl --user stop --no-block \$(units \$(instance) | grep "^st")
	wait_until test -e usr1
	collect 0 st
	instance >instance.out
	flux module remove sdexec
	EOT
	run_instance 1 conf stoptimer.sh &&
	test_debug "cat st.adopted" &&
	test -s st.adopted &&
	echo 0 >expect.st && test_cmp expect.st st.status &&
	test -z "$(units $(cat instance.out))"
'

test_done
