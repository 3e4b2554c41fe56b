"""How soon after ``stage(epoch)`` an epoch is safe (copied, sealed, replicated to the buddies and
past the replication's barrier: ``Snapshot.busy()`` turns False) while the program computes, and
how long a synchronous ``stage(); commit(); wait()`` takes, with the replication streamed
(``DPMPI_REPL_STREAM=1``: each piece sent as soon as it is copied) and not (``0``), the settings
alternated step by step in one job so that both see the same machine. A kill before an epoch is
safe makes the restore go back one more epoch (one more step recomputed): most of issue 13's
"kill -> back where it failed".

Each rank (``dpmpi-run -n N``) holds ``--mib`` MiB of state, computes a step of ``--step-ms`` in
small NumPy calls (a 96 x 96 matmul, ~0.1 ms; ``--wait``: 1 ms sleeps, an accelerator-like step),
checking ``busy()`` after each, then commits and stages the next epoch as ``dpmpi.Runtime``
does. Rank 0 prints (and ``--out`` saves) per setting the median over the ranks of each rank's
median stage -> safe (the first 2 steps of each setting left out) and of the synchronous commit.

    cd /tmp && REPO/.venv/bin/dpmpi-run -n 2 -- REPO/.venv/bin/python REPO/bench/safe_after.py \
        --mib 64 --step-ms 100 --steps 12 [--wait] [--out FILE.json]

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
    parser.add_argument("--steps", type=int, default=12, help="steps per setting")
    parser.add_argument("--settings", default="0,1", help="DPMPI_REPL_STREAM values, alternated")
    parser.add_argument("--wait", action="store_true",
                        help="the step waits (1 ms sleeps: an accelerator-like step) instead of computing")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    settings = args.settings.split(",")
    comm = dpmpi.init()
    rank, size = comm.Get_rank(), comm.Get_size()
    w = np.zeros(args.mib << 17, np.float64)
    w[:] = rank
    a = np.ones((96, 96))
    snap = dpmpi.Snapshot(comm, {"w": w})
    snap.stage(1)
    snap.commit(1)
    safe = {s: [] for s in settings}
    sync = {s: [] for s in settings}
    epoch = 1
    for i in range(args.steps * len(settings)):
        setting = settings[i % len(settings)]
        os.environ["DPMPI_REPL_STREAM"] = setting  # (read by the commit, on the committer thread)
        w[:: 1 << 12] += 1.0
        epoch += 1
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
        safe[setting].append(1e3 * ((t_safe or time.perf_counter()) - t_stage))
    for i in range(args.steps * len(settings)):
        setting = settings[i % len(settings)]
        os.environ["DPMPI_REPL_STREAM"] = setting
        w[:: 1 << 12] += 1.0
        epoch += 1
        comm.Barrier()
        t = time.perf_counter()
        snap.stage()
        snap.commit(epoch)
        snap.wait()
        sync[setting].append(1e3 * (time.perf_counter() - t))
    snap.close()
    mine = {s: (float(np.median(safe[s][2:])), float(np.median(sync[s][2:]))) for s in settings}
    rows = comm.gather(mine, root=0)
    if rank == 0:
        out = {"ranks": size, "mib": args.mib, "step_ms": args.step_ms, "wait": args.wait, "cpus": os.cpu_count(),
               "affinity": sorted(os.sched_getaffinity(0)), "steps_per_setting": args.steps, "by_setting": {
                   s: {"stage_to_safe_ms": round(float(np.median([r[s][0] for r in rows])), 2),
                       "sync_commit_ms": round(float(np.median([r[s][1] for r in rows])), 2)} for s in settings}}
        print(json.dumps(out), flush=True)
        if args.out:
            with open(args.out, "w") as f:
                json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
