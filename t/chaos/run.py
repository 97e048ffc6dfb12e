"""The chaos run: ``python3 -m chaos`` (with t/ on PYTHONPATH; see doc/dev/chaos.md).

The outer process (plain python3, no flux) renders conf.d/sdexec.toml as the sharness tests do,
runs the inner one under ``flux start --test-size=2`` and, once the instance is gone, checks that
no unit of it is left and prints the verdict. The inner one (``flux python -m chaos --inner``)
keeps jobs in flight, injects the faults, and records what it saw in a JSON result file.
"""

import argparse
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from . import procs, schedule, verdict

SRCDIR = Path(__file__).resolve().parents[2]  # the harness's checkout


def module_file(checkout, name="sdexec"):
    """The module file ``name`` of ``checkout`` (the one the instance loads)."""
    return Path(checkout).resolve() / "flux_sdexec" / "modules" / f"{name}.py"


STARTUP_BUDGET = 420  # s to start, end the last fault (upgrade, systemd after a bus kill), stop
# seconds the last units may take to go once every job is inactive: beyond sdexec's 20 s
# hold of a record revived after an upgrade whose answer job-exec had in fact read
UNITS_GONE_TIMEOUT = 30


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python3 -m chaos", description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, help="the seed (default: a random one, printed)")
    p.add_argument("--duration", type=float, default=60, help="seconds of chaos (default 60)")
    p.add_argument("--inflight", type=int, default=16, help="jobs kept in flight (default 16)")
    p.add_argument(
        "--settle", type=float, default=90,
        help="seconds every job may take to become inactive after the chaos ends (default 90)",
    )  # fmt: skip
    p.add_argument(
        "--long-stall", type=float, default=0,
        help="seconds of the one long systemd stall (above the module's 25 s per-call "
        "deadline, e.g. 30); 0, the default: none",
    )  # fmt: skip
    p.add_argument(
        "--kinds",
        help=f"fault kinds, comma-separated (default: all of {','.join(schedule.KINDS)}; "
        f"with --nodes: {','.join(schedule.NODES_KINDS)})",
    )  # fmt: skip
    p.add_argument(
        "--checkout", default=str(SRCDIR),
        help="the flux-sdexec checkout whose module is tested (default: this one)",
    )  # fmt: skip
    p.add_argument("--workdir", help="where config, logs and the result go (default: a new dir)")
    p.add_argument(
        "--uri",
        help="an instance already running (the site, t/site/chaos.sh) to run in, not a new one",
    )  # fmt: skip
    p.add_argument(
        "--nodes", type=int, default=0,
        help="run on the N nodes of t/site/nodes.sh, with node faults (t/site/nodes-chaos.sh)",
    )  # fmt: skip
    p.add_argument(
        "--methods", default="bgexec,bulk-exec",
        help="with --nodes: job-exec's methods, comma-separated, each in turn "
        "(default bgexec,bulk-exec)",
    )  # fmt: skip
    p.add_argument(
        "--method-period", type=float, default=60,
        help="with --nodes: seconds each method stays before the next one (default 60)",
    )  # fmt: skip
    p.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.kinds is None:
        args.kinds = ",".join(schedule.NODES_KINDS if args.nodes else schedule.KINDS)
    args.kinds = [k for k in args.kinds.split(",") if k]
    args.methods = [m for m in args.methods.split(",") if m]
    bad = sorted(set(args.methods) - {"bgexec", "bulk-exec"})
    if bad or not args.methods:
        p.error(f"--methods: bgexec and/or bulk-exec, not {','.join(bad) or 'nothing'}")
    if args.seed is None:
        args.seed = secrets.randbelow(2**31)
    return args


def say(text):
    print(text, flush=True)


def render_config(confdir, checkout):
    """``checkout``'s conf.d/sdexec.toml pointing at its modules, plus jobs through sdexec."""
    confdir.mkdir(parents=True, exist_ok=True)
    module, mapper = module_file(checkout), module_file(checkout, "sdexec-mapper")
    text = (Path(checkout) / "conf.d" / "sdexec.toml").read_text()
    text = re.sub(r"(?m)^sdexec\.module *=.*$", f'sdexec.module = "{module}"', text)
    text = re.sub(r"(?m)^sdexec-mapper\.module *=.*$", f'sdexec-mapper.module = "{mapper}"', text)
    (confdir / "sdexec.toml").write_text(text)
    # as t/lib/sharness-sdexec.sh: no system bus here, so sdmon never puts ranks online
    (confdir / "test-resources.toml").write_text(
        '[modules]\nresource.args = ["monitor-force-up"]\n'
    )
    # bgexec only: exec.method is instance-wide, and flux sdexec upgrade refuses to run while
    # bulk-exec jobs run (their streams end with job-exec), so bulk-exec cannot share the mix.
    (confdir / "exec.toml").write_text('[exec]\nservice = "sdexec"\nmethod = "bgexec"\n')


def list_units(glob):
    """Every loaded unit matching ``glob`` (systemctl --user list-units --all)."""
    res = subprocess.run(
        ["systemctl", "--user", "list-units", "--all", "--plain", "--no-legend", glob],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return [line.split()[0] for line in res.stdout.splitlines() if line.strip()]


def list_units_failed():
    """The user manager's failed units, whoever left them."""
    res = subprocess.run(
        ["systemctl", "--user", "list-units", "--failed", "--plain", "--no-legend"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return [line.split()[0] for line in res.stdout.splitlines() if line.strip()]


def unit_globs(instance, glob, bulk_exec):
    """What no unit may match after the run: the instance's units (``glob``), their keepers
    (systemd/keepers.py) and accounting slices, the guard; with ``bulk_exec`` (on
    the nodes) job-exec's own names too, their keepers and slices."""
    globs = [glob, glob.replace(".service", ".slice"), f"app-sdexec-*:{instance}_*.slice"]
    globs.append(f"sdexec-guard-*-{instance}.service")
    if bulk_exec:
        globs += ["imp-shell-*.service", "imp?x2dshell*.slice", "app-sdexec-imp*.slice"]
    return globs


def units_left(globs, timeout=UNITS_GONE_TIMEOUT):
    """Units matching ``globs`` still there after waiting up to ``timeout`` s for them to go."""
    deadline = time.monotonic() + timeout
    while True:
        left = [u for g in globs for u in list_units(g)]
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.5)


def user_manager_reachable():
    """Point at the user instance as the sharness tests do; True when it answers."""
    os.environ.setdefault("XDG_RUNTIME_DIR", f"/run/user/{os.getuid()}")
    os.environ.setdefault(
        "DBUS_SESSION_BUS_ADDRESS", f"unix:path={os.environ['XDG_RUNTIME_DIR']}/bus"
    )
    return procs.manager_pid() is not None


def outer(args):
    if not user_manager_reachable():
        say('chaos: the systemd user instance does not answer; start one with: '
            'eval "$(t/start-user-systemd.sh)"')  # fmt: skip
        return 2
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="sdexec-chaos-"))
    workdir.mkdir(parents=True, exist_ok=True)
    say(
        f"chaos: seed={args.seed} duration={args.duration:g}s inflight={args.inflight} "
        f"kinds={','.join(args.kinds)} long-stall={args.long_stall:g}s workdir={workdir}"
    )
    if args.nodes:
        say(
            f"chaos: reproduce with: t/site/nodes-chaos.sh --seed {args.seed} --duration"
            f" {args.duration:g} --kinds {','.join(args.kinds)} --methods"
            f" {','.join(args.methods)} (on {args.nodes} nodes: t/site/nodes.sh up {args.nodes})"
        )
    else:
        say(
            f"chaos: reproduce with: make chaos SEED={args.seed} DURATION={args.duration:g}"
            f" LONG_STALL={args.long_stall:g}"
        )
    # bad kinds fail here
    schedule.fault_schedule(args.seed, 1, args.kinds, args.long_stall, ranks=args.nodes or 2)
    result_file = workdir / "result.json"
    result_file.unlink(missing_ok=True)
    env = dict(os.environ)
    paths = [str(Path(args.checkout).resolve()), str(SRCDIR / "t"), env.get("PYTHONPATH")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    if args.uri:
        env["FLUX_URI"] = args.uri
        start = []
    else:
        render_config(workdir / "conf", args.checkout)
        start = [
            "flux", "start", "--test-size=2", f"--config-path={workdir / 'conf'}",
            f"-Slog-filename={workdir / 'broker.log'}", "-Slog-stderr-level=1",
            "-Slog-ring-size=100000",
        ]  # fmt: skip
    cmd = start + [
        "flux", "python", "-m", "chaos", "--inner", f"--workdir={workdir}",
        f"--seed={args.seed}", f"--duration={args.duration}", f"--inflight={args.inflight}",
        f"--settle={args.settle}", f"--long-stall={args.long_stall}",
        f"--kinds={','.join(args.kinds)}", f"--checkout={args.checkout}",
        f"--nodes={args.nodes}", f"--methods={','.join(args.methods)}",
        f"--method-period={args.method_period}",
    ]  # fmt: skip
    budget = args.duration + args.long_stall + args.settle + STARTUP_BUDGET
    harness_errors = []
    instance = subprocess.Popen(cmd, env=env, start_new_session=True)
    try:
        rc = instance.wait(budget)
        if rc != 0:
            harness_errors.append(f"flux start exited {rc}")
    except subprocess.TimeoutExpired:
        harness_errors.append(f"the instance did not exit within {budget:g}s: killed")
        _kill_session(instance)
    finally:
        # last resort: never leave systemd stopped (SIGCONT to a running process does nothing)
        pid = procs.manager_pid()
        if pid:
            os.kill(pid, signal.SIGCONT)
    try:
        result = json.loads(result_file.read_text())
    except (OSError, ValueError) as exc:
        result = {"seed": args.seed, "duration": args.duration}
        harness_errors.append(f"the run left no result ({exc})")
    result.setdefault("harness_errors", []).extend(harness_errors)
    if result.get("globs") and not args.uri:  # a running instance is not shut down
        result["units_left_after_shutdown"] = units_left(result["globs"])
        for unit in result["units_left_after_shutdown"]:
            say(f"left after shutdown: {unit}; stopping and resetting it")
            for verb in ("stop", "reset-failed"):
                subprocess.run(["systemctl", "--user", verb, unit], capture_output=True, timeout=60)
    failed = list_units_failed()
    if failed:
        say(f"note: failed units of the user manager (not this instance's): {' '.join(failed)}")
    for line in verdict.report(result):
        say(line)
    if verdict.violations(result):
        return 1
    if not args.workdir:  # a passing run's files are of no further use
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


def _kill_session(instance):
    """SIGTERM, then SIGKILL, the session of ``instance`` (flux start and its brokers)."""
    for sig, grace in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(instance.pid, sig)
        except ProcessLookupError:
            return
        try:
            instance.wait(grace)
            return
        except subprocess.TimeoutExpired:
            continue
