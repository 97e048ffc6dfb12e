"""Module RSS of our sdexec: after N launches, and under a `yes`-style flooding writer.

Run inside an instance: `flux start --test-size=1 flux python bench/flood_rss.py
--py-module flux_sdexec/modules/sdexec.py` (a systemd user instance must answer). Loads
the module, finds its process under the broker in /proc, and prints JSON: RSS after load,
after --launches launches of `true`, and its peak while `yes` streams --flood-mb MB
(line mode: one message per 2-byte line, so the responses queue up behind the broker).
"""

import argparse
import glob
import json
import os
import subprocess
import threading
import time

SDEXEC = ["flux", "exec", "--service", "sdexec", "-r", "0"]


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def module_pid(broker_pid, module_file):
    """The module loader process (flux-module-python-exec) under the broker running the file."""
    for d in glob.glob("/proc/[0-9]*"):
        try:
            with open(f"{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"{d}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        args = cmd.split(b"\0")
        if ppid == broker_pid and any(a.endswith(b"flux-module-python-exec.py") for a in args):
            if os.path.basename(module_file).encode() in cmd:
                return int(d.rsplit("/", 1)[1])
    raise SystemExit(f"no process of {module_file} under broker {broker_pid}")


def flood_peak(pid, mb):
    """Peak RSS while `yes` writes ``mb`` MB through the module to a reader."""
    peak, done = [0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_kb(pid))
            done.wait(0.05)

    t = threading.Thread(target=sample)
    t.start()
    start = time.monotonic()
    cmd = f"{' '.join(SDEXEC)} yes | head -c {mb * 1000000} | wc -c"
    out = subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout
    elapsed = time.monotonic() - start
    done.set()
    t.join()
    return peak[0], int(out.strip() or 0), elapsed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--py-module", required=True)
    ap.add_argument("--launches", type=int, default=1000)
    ap.add_argument("--flood-mb", type=int, default=20)
    args = ap.parse_args()
    module = os.path.abspath(args.py_module)
    subprocess.run(["flux", "module", "load", module], check=True)
    broker = int(subprocess.check_output(["flux", "getattr", "broker.pid"]))
    pid = module_pid(broker, module)
    result = {"rss_kb_loaded": rss_kb(pid)}
    for _ in range(args.launches):
        subprocess.run(SDEXEC + ["true"], check=True)
    result["launches"] = args.launches
    result["rss_kb_after_launches"] = rss_kb(pid)
    peak, nbytes, elapsed = flood_peak(pid, args.flood_mb)
    result.update(flood_mb=args.flood_mb, flood_bytes_read=nbytes, flood_s=round(elapsed, 2))
    result.update(rss_kb_flood_peak=peak, rss_kb_after_flood=rss_kb(pid))
    subprocess.run(["flux", "module", "remove", "sdexec"], check=True)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
