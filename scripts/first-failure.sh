#!/bin/sh
# first-failure.sh LOG [BROKER_LOG]: from a sharness script's verbose LOG, the first test that
# failed (a known breakage, "# TODO", is not one): its last 25 lines of output, ending with its
# "not ok" line; then BROKER_LOG's last 8 errors, when that file is there. Indented, for the
# end of a tier's output.
log=$1 broker_log=${2:-}
awk '/^expecting success:/ { n = 0; script = ($0 ~ /^expecting success:[[:space:]]*$/); next }
    script && /^[[:space:]]*$/ { script = 0; next }
    !script { out[++n] = $0 }
    /^not ok [0-9]+/ && !/# TODO/ { for (i = (n > 25 ? n - 24 : 1); i <= n; i++) print "    " out[i]; exit }' "$log"
if [ -n "$broker_log" ] && [ -f "$broker_log" ]; then
    echo "   its broker log's errors (last 8; $broker_log):"
    grep -E '\.(err|crit|alert|emerg)\[' "$broker_log" | tail -n 8 | sed 's/^/    /'
fi
