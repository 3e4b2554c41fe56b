"""The primitives path with and without an idle spare: the same MLP-like program (numpy matmuls,
an Allreduce of the gradient, snap.stage() + snap.commit(k) every step, OpenBLAS with its default
threads), run with `dpmpi-run -n A` and `dpmpi-run -n A+1 --spares 1`, interleaved, and the
ratio of the medians reported (target: within 10 %).

    .venv/bin/python bench/spare_speed.py [--active 2] [--steps 1000] [--repeats 5] [--out bench/results/spare_speed.json]

Measured before the fix (2 cores, 2 active): 1.03 s vs 16.2 s (the issue's figure); the cause
was that mpirun, once the spare made N exceed the cores, bound nothing, and a commit waited on a
nice-19 thread.
"""
import argparse
import json
import os
import pathlib
import platform
import re
import statistics
import sys
import tempfile

from dpmpi.bench.common import run_job

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROGRAM = '''
import sys, time
import numpy as np
import dpmpi
from mpi4py import MPI
comm = dpmpi.init()
rng = np.random.default_rng(comm.Get_rank())
w = np.ones((256, 256)) * 0.01
m = np.zeros_like(w)
x = rng.standard_normal((64, 256))
snap = dpmpi.Snapshot(comm, {"w": w, "m": m})
steps = int(sys.argv[1])
comm.Barrier()
t0 = time.perf_counter()
for k in range(1, steps + 1):
    g = x.T @ np.tanh(x @ w)
    comm.Allreduce(MPI.IN_PLACE, g)
    m[...] = 0.9 * m + g / comm.Get_size()
    w -= 1e-4 * m
    snap.stage()
    snap.commit(k)
dt = time.perf_counter() - t0
if comm.Get_rank() == 0:
    print(f"SECONDS {dt:.4f}", flush=True)
'''


def one(n: int, spares: int, steps: int, path: str) -> float | None:
    cmd = [sys.executable, "-m", "dpmpi.run", "-n", str(n), "--spares", str(spares), "--", sys.executable, path,
           str(steps)]
    ran = run_job(cmd, dict(os.environ), "/", 600)
    if ran is None or ran[0] != 0:
        return None
    m = re.search(r"SECONDS ([0-9.]+)", ran[1])
    return float(m.group(1)) if m else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--active", type=int, default=2)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "spare_speed.json"))
    args = ap.parse_args()
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(PROGRAM)
    times: dict[str, list] = {"no_spare": [], "one_spare": []}
    for _ in range(args.repeats):
        times["no_spare"].append(one(args.active, 0, args.steps, f.name))
        times["one_spare"].append(one(args.active + 1, 1, args.steps, f.name))
    os.unlink(f.name)
    ok = {k: [t for t in v if t is not None] for k, v in times.items()}
    med = {k: statistics.median(v) if v else None for k, v in ok.items()}
    ratio = med["one_spare"] / med["no_spare"] if all(med.values()) else None
    result = {"active": args.active, "steps": args.steps, "cores": os.cpu_count(), "seconds": times,
              "median_s": med, "ratio_with_spare": ratio, "within_10_percent": ratio is not None and ratio <= 1.10,
              "oversubscribed": args.active + 1 > (os.cpu_count() or 1), "host": platform.node()}
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps({k: result[k] for k in ("median_s", "ratio_with_spare", "within_10_percent", "oversubscribed")}))


if __name__ == "__main__":
    main()
