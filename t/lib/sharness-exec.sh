# flux-sdexec: helpers shared by t0001 and t0042 (streaming exec).
# Source after sharness-sdexec.sh, inside the instance.

# unit NAME: an SDEXEC_NAME inside this instance's glob, so the final check
# also covers units named by the tests.
unit() {
	echo "$1:$SDEXEC_INSTANCE.service"
}
