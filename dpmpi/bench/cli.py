"""``dpmpi-bench`` (also ``python -m dpmpi.bench``): dpmpi's bench suite, one command.

    dpmpi-bench SUBCOMMAND [options] [-- extra mpirun arguments]
    dpmpi-bench all --quick                      # everything, short (minutes), then the report
    dpmpi-bench repair --ranks 4,8,16 --spares 2 --hostfile hosts --map-by ppr:8:node
    dpmpi-bench report --out bench/results       # plots (PNG) and report.md from the JSON files

Run it inside a dpmpi checkout (or give --source): the jobs run its examples/ and
tests/programs/. Results: DIR/SUBCOMMAND.json (--out, default bench/results of the checkout).
Progress: one line per job on stderr. Plots need matplotlib (pip install "dpmpi[bench]"); without
it the JSON and report.md are written and the report says that the plots were skipped."""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
import time
from pathlib import Path

from dpmpi.bench.common import BenchError, Context, Launcher, parse_list, source_root, write_json

# subcommand -> (module, one line of help); "all" runs them in this order, then "report"
SUBCOMMANDS = {
    "repair": ("repair", "hot-swap repair time per phase, kill -> repaired (tests/programs/hotswap.py)"),
    "restore": ("restore", "restore speed into untouched vs touched arrays, per state size and number of arrays"),
    "snapshot": ("snapshot", "snapshot throughput, replication, restore, compute kept while snapshotting"),
    "e2e": ("e2e", "time to resume vs relaunch + reload of the mpi4py twins, per workload and state size"),
    "overhead": ("overhead", "failure-free overhead vs snapshot interval, and the expected lost work"),
    "chaos": ("chaos", "random kills from outside, one verdict per run (bit-identical results)"),
    "watcher": ("watcher", "the failure watcher: kill -> noticed, time to resume with and without it"),
    "scale": ("scale", "repair and restore phases over ranks, a fitted cost model, 512/4096-rank predictions"),
}
IN_ALL = ("repair", "restore", "snapshot", "e2e", "overhead", "chaos", "scale", "watcher")
QUICK_SKIP = ("watcher",)  # all --quick leaves these out (seconds-long steps)

# per subcommand: option -> (full default, --quick default)
DEFAULTS = {
    "repair": {"ranks": ([4, 8], [4]), "spares": (1, 1), "kills": (20, 2), "respawn_ranks": ([4, 8], [4]),
               "idle_iters": (200000, 20000), "timeout": (120, 120)},
    "restore": {"ranks": ([2], [2]), "state_mib": ([8, 64, 256], [8, 64]), "arrays": ([1, 600], [1]), "repeats": (3, 1),
                "timeout": (300, 300)},
    "snapshot": {"sizes": ([1, 16, 64, 256, 1024], [1, 16, 64]), "repl_sizes": ([16, 64, 256], [16, 64]),
                 "repeats": (5, 3), "compute_mib": (64, 16), "timeout": (600, 600)},
    "e2e": {"workloads": (["mlp-batch16", "mlp-batch256", "jacobi", "accel250"], ["jacobi"]),
            "state_mib": ([8, 64], [4, 16]),
            "kills": (10, 2), "baseline_kills": (5, 1), "ranks": ([4], [4]), "timeout": (600, 300),
            "kill_at": ([0.0], [0.0])},
    "overhead": {"workloads": (["mlp", "jacobi", "accel"], ["jacobi", "accel"]), "state_mib": ([64], [8]),
                 "intervals": ([1, 2, 5, 10], [1, 2, 5, 10]), "rounds": (8, 4), "block": (5, 4), "ranks": ([4], [4]),
                 "timeout": (1200, 300)},
    "chaos": {"workloads": (["mlp", "jacobi", "mlp-prim", "jacobi-prim"], ["jacobi"]), "kills_list": ([1, 2], [1]),
              "runs": (4, 2), "ranks": ([4], [4]), "timeout": (60, 60)},
    "watcher": {"kills": (8, 1), "resume_kills": (8, 1), "step_ms": (250, 250)},
    "scale": {"ranks": ([2, 4, 8, 16, 32], [2, 4, 8, 16, 32]), "state_mib": ([8, 64, 256], [4, 32]),
              "repeats": (3, 1), "link_gbs": (12.5, 12.5), "timeout": (300, 300)},
}


def _list(what: str, kind=int):
    """An argparse type: a comma-separated list, with dpmpi-bench's message when it is not one."""
    def convert(text: str) -> list:
        try:
            return parse_list(text, kind, what)
        except BenchError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return convert


def _common(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sweeps and output (defaults depend on the subcommand and on --quick)")
    g.add_argument("--ranks", type=_list("--ranks"), help="active ranks, e.g. 4,8,16")
    g.add_argument("--spares", type=int, help="spare ranks per job (repair, chaos; restore, e2e and scale use 1)")
    g.add_argument("--state-mib", type=_list("--state-mib", float), help="MiB per rank, e.g. 8,64,256")
    g.add_argument("--repeats", type=int, help="jobs per point (repair, e2e: kills; chaos: runs)")
    g.add_argument("--timeout", type=float, help="hard timeout per job, s (a hang is a failure)")
    g.add_argument("--quick", action="store_true", help="short sweeps (all --quick: minutes)")
    g.add_argument("--out", help="results directory (default: bench/results of the checkout)")
    g.add_argument("--source", help="the dpmpi checkout to run (default: the current directory or a parent)")
    la = p.add_argument_group("launcher (passed to dpmpi-run / mpirun; more mpirun arguments after --)")
    la.add_argument("--hostfile", help="mpirun --hostfile")
    la.add_argument("--map-by", help="mpirun --map-by, e.g. ppr:8:node")


def _specific(name: str, p: argparse.ArgumentParser) -> None:
    if name == "repair":
        p.add_argument("--kills", type=int, help="kills per configuration")
        p.add_argument("--respawn-ranks", type=lambda s: _list("--respawn-ranks")(s) if s else [],
                       help="active ranks for the respawn path (no spares, policy respawn; '' to skip)")
        p.add_argument("--idle-iters", type=int, help="iterations of the failure-free job timing the idle spare")
    elif name == "restore":
        p.add_argument("--arrays", type=_list("--arrays"), help="the state split into N equal arrays, e.g. 1,600 "
                                                                "(each split against one array of the same bytes)")
    elif name == "snapshot":
        p.add_argument("--sizes", type=_list("--sizes"), help="MiB for stage+commit, e.g. 1,16,64")
        p.add_argument("--repl-sizes", type=_list("--repl-sizes"), help="MiB for replication")
        p.add_argument("--compute-mib", type=int, help="state of the compute-overlap part")
    elif name == "e2e":
        p.add_argument("--workloads", type=lambda s: s.split(","), help="mlp-batchB (B: batch size), jacobi")
        p.add_argument("--kills", type=int, help="dpmpi kills per workload and state size")
        p.add_argument("--baseline-kills", type=int, help="relaunch-baseline kills per checkpoint interval")
        p.add_argument("--kill-at", type=_list("--kill-at", float),
                       help="where in the step each dpmpi kill strikes, as fractions of the twin's step taken in "
                            "turn, e.g. 0,0.25,0.5,0.75 (default 0: at its start)")
    elif name == "overhead":
        p.add_argument("--workloads", type=lambda s: s.split(","), help="mlp, jacobi, accel")
        p.add_argument("--intervals", type=_list("--intervals"), help="snapshot every K steps, e.g. 1,2,5,10")
        p.add_argument("--rounds", type=int, help="rounds of blocks after a warm-up round")
        p.add_argument("--block", type=int, help="steps per block")
    elif name == "chaos":
        from dpmpi.bench import chaos

        chaos.add_options(p)
    elif name == "watcher":
        p.add_argument("--kills", type=int, help="detection: kills per mode")
        p.add_argument("--resume-kills", type=int, help="time to resume: kills per configuration")
        p.add_argument("--step-ms", type=float)
    elif name == "scale":
        p.add_argument("--link-gbs", type=float, help="link bandwidth for the predicted restore transfer, GB/s "
                                                      "(default 12.5: 100 Gb/s)")


def parser() -> argparse.ArgumentParser:
    doc = __doc__ or ""
    ap = argparse.ArgumentParser(prog="dpmpi-bench", description=doc.split("\n\n")[0],
                                 epilog=doc.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True, metavar="SUBCOMMAND")
    for name, (_mod, text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=text, description=text)
        _common(p)
        _specific(name, p)
    p = sub.add_parser("all", help="every subcommand in turn (all --quick: short), then report")
    _common(p)
    p.add_argument("--skip", type=lambda s: [x for x in s.split(",") if x], default=[],
                   help="subcommands to leave out (e.g. repair,scale when run apart with other sizes)")
    p = sub.add_parser("report", help="plots and one Markdown page (report.md) from an --out directory")
    p.add_argument("--out", help="results directory (default: bench/results of the checkout)")
    p.add_argument("--source", help=argparse.SUPPRESS)
    return ap


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """dpmpi-bench's own arguments, and the extra mpirun arguments after the first '--'."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def resolve(name: str, a: argparse.Namespace) -> argparse.Namespace:
    """The subcommand's options: what was given, else its default (full or --quick)."""
    o = argparse.Namespace(**vars(a))
    # --repeats is the jobs per point everywhere: the kills (repair, e2e) and runs (chaos) too
    alias = {"repair": "kills", "e2e": "kills", "chaos": "runs"}.get(name)
    if alias and getattr(o, alias, None) is None and getattr(o, "repeats", None):
        setattr(o, alias, o.repeats)
    for key, (full, quick) in DEFAULTS.get(name, {}).items():
        if getattr(o, key, None) is None:
            setattr(o, key, quick if a.quick else full)
    for key in ("repeats", "spares"):
        if getattr(o, key, None) is not None and getattr(o, key) < (0 if key == "spares" else 1):
            raise BenchError(f"--{key} must be >= {0 if key == 'spares' else 1}")
    return o


def all_names(quick: bool, skip: list[str]) -> list[str]:
    """What ``all`` runs, in order (pure)."""
    unknown = [x for x in skip if x not in SUBCOMMANDS]
    if unknown:
        raise BenchError(f"--skip: unknown subcommand(s) {', '.join(unknown)} (known: {', '.join(SUBCOMMANDS)})")
    return [n for n in IN_ALL if n not in skip and not (quick and n in QUICK_SKIP)]


def run_one(name: str, ctx: Context, a: argparse.Namespace) -> bool:
    mod = importlib.import_module(f"dpmpi.bench.{SUBCOMMANDS[name][0]}")
    o = resolve(name, a)
    t0, load0 = time.monotonic(), [round(x, 2) for x in os.getloadavg()]
    print(f"== dpmpi-bench {name}" + (" (quick)" if ctx.quick else ""), file=sys.stderr, flush=True)
    result = mod.run(ctx, o)
    result.setdefault("wall_s", round(time.monotonic() - t0, 1))
    if isinstance(result.get("machine"), dict):  # the machine is shared: how busy it was, start and end
        result["machine"].update(loadavg=load0, loadavg_end=[round(x, 2) for x in os.getloadavg()])
    result["argv"] = sys.argv[1:]
    result["quick"] = ctx.quick
    path = write_json(ctx.out, name, result)
    for line in mod.summary(result):
        print(line, flush=True)
    print(f"wrote {path} ({result['wall_s']} s)", flush=True)
    return bool(result.get("ok", True))


def main(argv: list[str] | None = None) -> int:
    own, extra = split_argv(sys.argv[1:] if argv is None else argv)
    a = parser().parse_args(own)
    try:
        root = source_root(a.source)
        out = Path(a.out).resolve() if a.out else root / "bench" / "results"
        if a.command == "report":
            from dpmpi.bench import report

            print(report.write(out))
            return 0
        launcher = Launcher(a.hostfile, a.map_by, tuple(extra))
        names = all_names(a.quick, a.skip) if a.command == "all" else [a.command]
        ok = True
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="dpmpi-bench-") as tmp:
            ctx = Context(out, root, launcher, a.quick, tmp)
            for name in names:
                ok = run_one(name, ctx, a) and ok
        if a.command == "all":
            from dpmpi.bench import report

            print(report.write(out))
            print(f"dpmpi-bench all{' --quick' if a.quick else ''}: {time.monotonic() - t0:.0f} s", flush=True)
        return 0 if ok else 1
    except BenchError as exc:
        print(f"dpmpi-bench: {exc}", file=sys.stderr)
        return 2
