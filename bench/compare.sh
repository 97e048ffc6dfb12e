#!/bin/bash
# Compare flux-core's C sdexec module with flux-sdexec's Python one.
#
# Usage: bench/compare.sh [bench.py options, e.g. --runs 40 --jobs 200 --json out.json,
#        --order ours,C, --rounds 2 (ABBA; raise BENCH_TIMEOUT), --profile ours (py-spy
#        the module during one extra cat run; needs py-spy on PATH)]
#
# Starts ONE `flux start --test-size=2` instance with [exec] service = "sdexec" and, for each
# module in turn (C first), loads it on both ranks (plus sdbus for C), measures launch latency,
# cat throughput (line and raw mode), 32/200 concurrent launches, module CPU and RSS and a
# 200-job burst, unloads it, and prints a table (bench/chart.py draws --json output).
#
# Environment: C_MODULE, PY_MODULE (module paths), BENCH_TIMEOUT (seconds for the whole
# instance, default 330), FILE_MB (size of the cat file, default 20), USAGE (ours'
# `[sdexec] usage`: jobs, all or none; unset: the module's default, jobs).
set -euo pipefail

name=compare.sh
FILE_MB=${FILE_MB:-20}
# shellcheck source=bench/instance.sh
. "$(dirname "$0")/instance.sh"

# The cat file: FILE_MB MB (10^6 bytes) of 76-character lines (77 bytes with the newline).
flux python - "$tmp/lines.txt" "$FILE_MB" <<'EOF'
import base64, os, sys
path, mb = sys.argv[1], int(sys.argv[2])
nlines = mb * 1000000 // 77
block = base64.b64encode(os.urandom(57 * 1000))  # 76000 characters
with open(path, "wb") as f:
    for i in range(0, nlines, 1000):
        n = min(1000, nlines - i)
        f.write(b"".join(block[j * 76:(j + 1) * 76] + b"\n" for j in range(n)))
        block = block[76:] + block[:76]
EOF
echo "compare.sh: $(stat -c %s "$tmp/lines.txt") bytes in $tmp/lines.txt" >&2

bench_which
set +e
bench_run "$here/bench.py" --file "$tmp/lines.txt" "$@"
exit $?
