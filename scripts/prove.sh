#!/bin/sh
# prove.sh TEST...: prove --timer over sharness TESTs (run from their directory), each run
# verbose with its test_debug output (-v -d) into test-logs/NAME.log. A test that passes has
# its trash directory removed (-d keeps it); one that fails keeps it, and after prove's
# summary each failed test's first failure is shown (scripts/first-failure.sh), or the end of
# its log when no test failed but the script did. A run's printed tail says why it failed.
#
#   prove.sh --one TEST   what prove runs for each TEST (its --exec): only TAP reaches prove
set -u
logs=$PWD/test-logs
[ "${1:-}" = --one ] || {
    mkdir -p "$logs" || exit 1
    rm -f "$logs"/*.log "$logs"/*.failed
    prove --timer --exec "$0 --one" "$@"
    rc=$?
    [ $rc -eq 0 ] && exit 0
    for failed in "$logs"/*.failed; do
        [ -e "$failed" ] || continue
        name=$(basename "$failed" .failed)
        log=$logs/$name.log
        echo "== $name failed (exit $(cat "$failed"); log: $log)"
        if grep -q -E '^not ok [0-9]+' "$log"; then
            "$(dirname "$0")/first-failure.sh" "$log" "$PWD/trash directory.$name/broker.log"
        else
            tail -n 15 "$log" | sed 's/^/    /'
        fi
    done
    exit $rc
}
test=$2
name=$(basename "$test" .t)
"./$test" -v -d >"$logs/$name.log" 2>&1
rc=$?
grep -E '^(not )?ok [0-9]+|^1\.\.[0-9]+|^# ' "$logs/$name.log"
if [ $rc -eq 0 ]; then
    rm -rf "trash directory.$name"
else
    echo $rc >"$logs/$name.failed"
fi
exit $rc
