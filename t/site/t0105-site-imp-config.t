#!/bin/sh

test_description='A wrong IMP config fails guest jobs at once, saying why, and leaves no unit

The IMP config names another flux-shell in allowed-shells (the distribution'"'"'s path, not the
installed one): every guest job fails, bulk-exec and bgexec alike, without hanging; the IMP'"'"'s
own error is the note of the job'"'"'s exec exception (sdexec answers the exec with EPERM and the
IMP'"'"'s line), for 1-node and 2-node jobs; it is also in the exec eventlog (flux job attach
prints it, with bulk-exec: bgexec gets its output only with a wait'"'"'s status, which an
error has not); sdexec drains each rank whose IMP refused, naming the job and the error; no unit is
left. With the right config back (and the ranks undrained) guest jobs run again.'

. "$(dirname "$0")/sharness-site.sh"

IMP_TOML=$SITE_IMP_CONF/imp.toml
# whatever happens below, the harness's IMP config is written back at the end
. "$SITE_SRCDIR/t/site/security.sh"
cleanup "imp_config \"$(site_libexec flux-shell)\" >\"$IMP_TOML\""
test_expect_success 'the IMP config names another flux-shell' '
	cp $IMP_TOML imp.toml.good &&
	sed "s|^allowed-shells = .*|allowed-shells = [ \"/usr/libexec/flux/flux-shell\" ]|" \
		imp.toml.good >$IMP_TOML &&
	test_debug "cat $IMP_TOML" &&
	! grep "$(site_libexec flux-shell)" $IMP_TOML
'
# drained_ranks_are IDSET: exactly the ranks IDSET are drained (the drain is an RPC of each
# rank's sdexec, answered after the job's end)
drained_ranks_are() {
	test "$(owner flux resource status -s drain -n -o "{ranks}")" = "$1"
}
# undrain_all: no rank drained (whatever the test found: the next job must be scheduled)
undrain_all() {
	_ranks=$(drained)
	test -z "$_ranks" || owner flux resource undrain $_ranks
}
FATAL="flux-imp: Fatal: exec: shell not in allowed-shells"
for method in bulk-exec bgexec; do
	for nodes in 1 2; do
		test_expect_success "$method: a $nodes-node guest job fails at once, the IMP error in its exception" '
			site_method $method &&
			test_must_fail guest1 timeout $T flux run -N$nodes echo never 2>attach.err &&
			test_debug "cat attach.err" &&
			grep "$FATAL" attach.err &&
			! grep never attach.err &&
			id=$(guest1 flux job last) &&
			guest1 flux job eventlog $id >eventlog.out &&
			test_debug "cat eventlog.out" &&
			grep "exception type=\"exec\" severity=0 userid=[0-9]* note=\"job shell exec error on broker [^ ]* (rank [01]): $FATAL\"" eventlog.out &&
			! grep "terminated before first barrier" eventlog.out &&
			guest1 flux job eventlog -p exec $id >exec.out &&
			test_debug "cat exec.out" &&
			if test $method = bulk-exec; then
				grep "log component=\"flux-imp\" stream=\"stderr\" rank=\"0\" data=\"$FATAL" exec.out
			else
				! grep "log component=\"flux-imp\"" exec.out
			fi &&
			site_wait_until_t no_shell_units_of $id &&
			site_wait_until_t no_guest_procs
		'
		test_expect_success "$method: sdexec drained the ranks of the job, naming it and the IMP error" '
			test_when_finished undrain_all &&
			id=$(guest1 flux job last) &&
			f58=$(guest1 flux job id --to=f58plain $id) &&
			ranks=$(guest1 flux jobs -no "{ranks}" $id | tr -d "[]") &&
			test_debug "echo ranks $ranks" &&
			site_wait_until_t drained_ranks_are $ranks &&
			owner flux resource drain -n -o "{ranks} {reason}" >drain.out &&
			test_debug "cat drain.out" &&
			grep "IMP error for job $f58: $FATAL" drain.out &&
			! grep "terminated before first barrier" drain.out &&
			undrain_all &&
			test -z "$(drained)"
		'
	done
done
test_expect_success 'the right IMP config back: guest jobs run' '
	cp imp.toml.good $IMP_TOML &&
	guest2 timeout $T flux run -N2 echo ran >ran.out &&
	test $(grep -c ran ran.out) -eq 2
'
test_expect_success 'cleanup: back to the site config' '
	site_reset_config
'
test_site_leaves_nothing

test_done
