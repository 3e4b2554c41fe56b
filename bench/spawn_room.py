"""Does leaving room for Comm.Spawn cost jobs that never spawn? The same job launched with the
earlier command line (``dpmpi.run.build(..., spawn_room=False)``: mpirun's default placement
when N <= cores) and with the current one (``--map-by core:OVERSUBSCRIBE --rank-by slot
--bind-to core:overload-allowed``), interleaved, in one run:

- bindings: each rank's ``Cpus_allowed_list`` under both launches, for -n 1, -n 2, -n 3 --spares 1,
  -n 4 --spares 1 and -n 4 (must be identical);
- time: ``examples/train_mlp.py --steps S --progress`` at -n N, whole job (launch to exit) and
  training (rank 0's first step line to its "done" line), ratio of the medians (current / earlier).

    .venv/bin/python bench/spawn_room.py [--n 2] [--steps 200] [--repeats 7] [--out bench/results/spawn_room.json]
"""
import argparse
import json
import os
import pathlib
import platform
import statistics
import sys
import tempfile
import time

from dpmpi.bench.common import run_job

from dpmpi import run

ROOT = pathlib.Path(__file__).resolve().parent.parent
CPUS = '''
import dpmpi
from mpi4py import MPI
line = next(l for l in open("/proc/self/status") if l.startswith("Cpus_allowed_list"))
print(f"CPUS {MPI.COMM_WORLD.Get_rank()} {line.split()[1]}", flush=True)
'''
LAYOUTS = (["-n", "1"], ["-n", "2"], ["-n", "3", "--spares", "1"], ["-n", "4", "--spares", "1"], ["-n", "4"])


def command(args: list[str], program: list[str], spawn_room: bool) -> tuple[list[str], dict[str, str]]:
    env = dict(os.environ)
    return run.build(run.parse_args([*args, "--", *program]), run.find_mpirun(), env, spawn_room=spawn_room), env


def bindings(path: str) -> dict:
    out = {}
    for args in LAYOUTS:
        for room in (False, True):
            cmd, env = command(args, [sys.executable, path], room)
            ran = run_job(cmd, env, "/", 120)
            ranks = {}
            for line in (ran[1] if ran else "").splitlines():
                if line.startswith("CPUS "):
                    _tag, rank, cpus = line.split()
                    ranks[int(rank)] = cpus
            out.setdefault(" ".join(args), {})["spawn_room" if room else "earlier"] = {
                "cpus": [ranks.get(r) for r in sorted(ranks)], "command": cmd[3:cmd.index("-x")]}
    for v in out.values():
        v["same"] = v["earlier"]["cpus"] == v["spawn_room"]["cpus"] and None not in v["earlier"]["cpus"]
    return out


def timed(n: int, steps: int, spawn_room: bool) -> dict | None:
    program = [sys.executable, str(ROOT / "examples" / "train_mlp.py"), "--steps", str(steps), "--progress"]
    cmd, env = command(["-n", str(n)], program, spawn_room)
    t0 = time.perf_counter()
    ran = run_job(cmd, env, str(ROOT), 600)
    wall = time.perf_counter() - t0
    if ran is None or ran[0] != 0:
        return None
    events = [json.loads(line) for line in ran[1].splitlines() if line.startswith("{")]
    mine = [e for e in events if e.get("rank") == 0]
    first = min(e["time"] for e in mine if e["event"] == "step")
    done = next(e["time"] for e in mine if e["event"] == "done")
    return {"job_s": round(wall, 4), "train_s": round(done - first, 4)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "spawn_room.json"))
    args = ap.parse_args()
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(CPUS)
    try:
        bound = bindings(f.name)
    finally:
        os.unlink(f.name)
    runs: dict[str, list] = {"earlier": [], "spawn_room": []}
    for i in range(args.repeats):  # interleaved, the order alternating, so load drifts hit both
        for room in ((False, True) if i % 2 == 0 else (True, False)):
            runs["spawn_room" if room else "earlier"].append(timed(args.n, args.steps, room))
    med = {}
    for key, vals in runs.items():
        ok = [v for v in vals if v]
        med[key] = {m: round(statistics.median(v[m] for v in ok), 4) if ok else None for m in ("job_s", "train_s")}
    ratio = {m: round(med["spawn_room"][m] / med["earlier"][m], 4) if med["earlier"][m] and med["spawn_room"][m]
             else None for m in ("job_s", "train_s")}
    failed = {k: sum(v is None for v in vals) for k, vals in runs.items()}
    result = {"n": args.n, "steps": args.steps, "repeats": args.repeats, "cores": os.cpu_count(),
              "host": platform.node(), "loadavg_at_end": os.getloadavg(), "bindings": bound,
              "bindings_identical": all(v["same"] for v in bound.values()), "runs": runs, "failed": failed,
              "median": med, "ratio_spawn_room_over_earlier": ratio}
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps({k: result[k] for k in ("bindings_identical", "median", "ratio_spawn_room_over_earlier",
                                             "failed", "loadavg_at_end")}))


if __name__ == "__main__":
    main()
