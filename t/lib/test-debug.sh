# Sourced right after sharness.sh: test_debug's output goes to stderr, so that a helper whose
# stdout a test captures (x=$(helper), helper >file) captures the same with --debug as
# without (scripts/prove.sh runs every script with --debug, to keep that output in its log).
test_debug() {
	test "$debug" = "" || eval "$1" >&2
}
