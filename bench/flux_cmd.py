"""Running flux commands for the benchmark: against one broker, its attributes, loading and
unloading a module on some ranks, the kernel log.
"""

import os
import subprocess
import sys
import time

from procfs import BenchError

DEVNULL = subprocess.DEVNULL


def log(text):
    print(f"[bench {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


RANK_URI = {}  # rank -> local-uri, for commands aimed at one broker (see rank_uris())


def run(args, timeout=60, check=True, rank=None, **kw):
    """Run a command (against broker ``rank`` if given); return CompletedProcess."""
    if rank is not None:
        kw["env"] = dict(os.environ, FLUX_URI=RANK_URI[rank])
    kw.setdefault("stdin", DEVNULL)
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    try:
        p = subprocess.run(args, timeout=timeout, text=True, **kw)
    except subprocess.TimeoutExpired:
        raise BenchError(f"timed out after {timeout}s: {' '.join(args)}") from None
    if check and p.returncode != 0:
        raise BenchError(f"rc={p.returncode}: {' '.join(args)}\n{p.stderr or ''}")
    return p


def rank_attrs(size):
    """{rank: (local-uri, broker.pid)}: all brokers run on this host (--test-size).

    Asked over RPC rather than with ``flux exec -r N``: flux-core 0.88's rexec logs
    "fbuf_read_watcher on stdout" errors for some multi-line outputs.
    """
    import flux

    h = flux.Flux()
    attrs = {}
    for rank in range(size):

        def get(name):
            return h.rpc("attr.get", {"name": name}, nodeid=rank).get()["value"]

        attrs[rank] = (get("local-uri"), int(get("broker.pid")))
    return attrs


# ---- module load/unload ----


def loaded(rank):
    p = run(["flux", "module", "list"], rank=rank, timeout=30)
    return {line.split()[0] for line in p.stdout.splitlines()[1:] if line.strip()}


def load_module(kind, path, ranks):
    for rank in ranks:
        if kind == "C" and "sdbus" not in loaded(rank):
            run(["flux", "module", "load", "sdbus"], rank=rank, timeout=60)
        run(["flux", "module", "load", path], rank=rank, timeout=60)
        if "sdexec" not in loaded(rank):
            raise BenchError(f"rank {rank}: sdexec not listed after loading {path}")


def unload_module(kind, ranks):
    for rank in reversed(ranks):
        run(["flux", "module", "remove", "sdexec"], rank=rank, timeout=60)
        if kind == "C":
            run(["flux", "module", "remove", "sdbus"], rank=rank, timeout=60)


def dmesg_lines(rank):
    return run(["flux", "dmesg"], rank=rank, timeout=30).stdout.splitlines()


def dmesg_problems(ranks):
    keys = (".err[", ".crit[", ".alert[", ".emerg[", ".warning[")
    return [line for r in ranks for line in dmesg_lines(r) if any(k in line for k in keys)]
