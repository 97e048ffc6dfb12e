#!/bin/sh

test_description='A wrong IMP config fails guest jobs at once, saying why, and leaves no unit

The IMP config names another flux-shell in allowed-shells (the distribution'"'"'s path, not the
installed one): every guest job fails, bulk-exec and bgexec alike, without hanging; the IMP'"'"'s
own error is in the job'"'"'s exec eventlog (flux job attach prints it) beside the exec
exception, job-exec drains the ranks whose shell never started, and no unit is left. With the
right config back (and the ranks undrained) guest jobs run again.'

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
for method in bulk-exec bgexec; do
	test_expect_success "$method: a 2-node guest job fails at once with the IMP's error" '
		site_method $method &&
		test_must_fail guest1 timeout $T flux run -N2 echo never 2>attach.err &&
		test_debug "cat attach.err" &&
		test $(grep -c "flux-imp: Fatal: exec: shell not in allowed-shells" attach.err) -eq 2 &&
		! grep never attach.err &&
		id=$(guest1 flux job last) &&
		guest1 flux job eventlog $id >eventlog.out &&
		grep "exception type=\"exec\"" eventlog.out &&
		guest1 flux job eventlog -p exec $id >exec.out &&
		grep "log component=\"flux-imp\" stream=\"stderr\" rank=\"0\" data=\"flux-imp: Fatal: exec: shell not in allowed-shells" exec.out &&
		site_wait_until_t no_shell_units_of $id &&
		site_wait_until_t no_guest_procs
	'
	test_expect_success "$method: job-exec drained the ranks, undrained by the admin" '
		owner flux resource drain -n -o "{ranks} {reason}" >drain.out &&
		test_debug "cat drain.out" &&
		grep "terminated before first barrier" drain.out &&
		owner flux resource undrain $(drained) &&
		test -z "$(drained)"
	'
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
