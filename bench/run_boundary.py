"""What a boundary between two dpmpi.Runtime runs costs, failure-free: the end's commit and
barrier, and (since the forty-third session) the next run's snapshot of its starting state with
its agreement (docs/runtime.md). Measured as the same steps made by one ``rt.run`` against one
``rt.run`` per step (the difference per run is the boundary's cost), alternated in rounds, with
the state's size given; a step is an ``allreduce`` and an in-place update of the state.

    python bench/run_boundary.py [--ranks 4] [--mib 64] [--steps 20] [--rounds 5]

Launches a dpmpi-run job (RANKS ranks + 1 spare, no failure); rank 0 writes the medians (ms per
step, ms per boundary) to bench/results/run_boundary.json. Figures from a machine with fewer
cores than RANKS + 1 are oversubscribed.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def rank_main(mib: int, steps: int, rounds: int, out: str) -> None:
    import dpmpi
    import numpy as np

    comm = dpmpi.init()
    w = np.zeros(max(1, mib * 2**20 // 8))
    rt = dpmpi.Runtime(comm, {"w": w}, snapshot_every=steps)  # (one snapshot per `steps` steps in both ways)

    def step(k):
        comm.allreduce(k)
        with rt.update():
            w[::4096] += 1.0
    rt.run(step, 1)
    one, each = [], []
    for _ in range(rounds):  # (alternated: the machine's drift falls on both)
        comm.mpi.barrier()
        t = time.perf_counter()
        rt.run(step, rt.step + steps)
        one.append(1e3 * (time.perf_counter() - t))
        comm.mpi.barrier()
        t = time.perf_counter()
        for _k in range(steps):
            rt.run(step, rt.step + 1)
        each.append(1e3 * (time.perf_counter() - t))
    if comm.Get_rank() == 0:
        med = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
        result = {"ranks": comm.Get_size(), "mib": mib, "steps": steps, "rounds": rounds, "cpus": os.cpu_count(),
                  "oversubscribed": comm.Get_size() + 1 > (os.cpu_count() or 1),
                  "one_run_ms": med(one), "a_run_per_step_ms": med(each),
                  "boundary_ms": round((med(each) - med(one)) / steps, 3), "rounds_one_ms": one,
                  "rounds_each_ms": each}
        with open(out, "w") as f:
            json.dump(result, f, indent=1)
        print(json.dumps({k: result[k] for k in ("mib", "steps", "one_run_ms", "a_run_per_step_ms", "boundary_ms")}))
    rt.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--mib", type=int, default=64)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", default=os.path.join(HERE, "results", "run_boundary.json"))
    a = p.parse_args()
    if a.rank:
        rank_main(a.mib, a.steps, a.rounds, a.out)
        return
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    run = os.path.join(os.path.dirname(sys.executable), "dpmpi-run")
    cmd = [run, "-n", str(a.ranks + 1), "--spares", "1", "--", sys.executable, os.path.abspath(__file__), "--rank",
           "--mib", str(a.mib), "--steps", str(a.steps), "--rounds", str(a.rounds), "--out", os.path.abspath(a.out)]
    sys.exit(subprocess.run(cmd, timeout=600).returncode)


if __name__ == "__main__":
    main()
