"""How soon after ``stage(epoch)`` an epoch is safe: copied, sealed, replicated to the buddies and
past the replication's barrier (``Snapshot.busy()`` turns False), while the program computes.
A kill before that point makes the restore go back one more epoch (one more step recomputed),
which is most of issue 13's "kill -> back where it failed".

Each rank (``dpmpi-run -n N``) holds ``--mib`` MiB of state, computes a step of ``--step-ms``
in small NumPy calls (a 96 x 96 matmul, ~0.1 ms; ``--wait``: 1 ms sleeps), checking ``busy()`` after each, then commits
and stages the next epoch as ``dpmpi.Runtime`` does. Prints and saves (``--out``) per rank the
median, min and max of stage -> safe over the steps after the first 3.

    cd /tmp && REPO/.venv/bin/dpmpi-run -n 2 -- REPO/.venv/bin/python REPO/bench/safe_after.py \
        --mib 64 --step-ms 100 --steps 23 [--out FILE.json]

(from outside the repository: its dpmpi/ folder would hide the installed package)
"""
import argparse
import json
import os
import time

import numpy as np

import dpmpi


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--step-ms", type=float, default=100.0)
    parser.add_argument("--steps", type=int, default=23)
    parser.add_argument("--wait", action="store_true",
                        help="the step waits (1 ms sleeps: an accelerator-like step) instead of computing")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    comm = dpmpi.init()
    rank, size = comm.Get_rank(), comm.Get_size()
    w = np.zeros(args.mib << 17, np.float64)
    w[:] = rank
    a = np.ones((96, 96))
    snap = dpmpi.Snapshot(comm, {"w": w})
    snap.stage(1)
    snap.commit(1)
    safe_ms = []
    for epoch in range(2, args.steps + 2):
        w[:: 1 << 12] += 1.0
        t_stage = time.perf_counter()
        snap.stage(epoch)
        t_safe = None
        while time.perf_counter() - t_stage < args.step_ms / 1e3:
            if args.wait:
                time.sleep(0.001)
            else:
                a = a @ a * (1.0 / 96)
            if t_safe is None and not snap.busy():
                t_safe = time.perf_counter()
        snap.commit(epoch)
        if t_safe is None:
            t_safe = time.perf_counter()
        safe_ms.append(1e3 * (t_safe - t_stage))
    snap.close()
    tail = safe_ms[3:]
    mine = {"rank": rank, "median_ms": round(float(np.median(tail)), 2), "min_ms": round(min(tail), 2),
            "max_ms": round(max(tail), 2), "n": len(tail)}
    rows = comm.gather(mine, root=0)
    if rank == 0:
        out = {"ranks": size, "mib": args.mib, "step_ms": args.step_ms, "wait": args.wait, "cpus": os.cpu_count(),
               "env": {k: v for k, v in os.environ.items() if k.startswith("DPMPI_")}, "per_rank": rows,
               "median_ms": round(float(np.median([r["median_ms"] for r in rows])), 2)}
        print(json.dumps(out), flush=True)
        if args.out:
            with open(args.out, "w") as f:
                json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
