"""What a collective costs between two dpmpi.Runtime runs, where each one the prologue record
watches is followed by an agreement (a death there is repaired and the call made again:
docs/runtime.md), against the same call on the raw mpi4py communicator (``comm.mpi``).

    python bench/between_cost.py [--ranks 4] [--calls 400] [--rounds 5]

Launches a dpmpi-run job (RANKS ranks + 1 spare, no failure); rank 0 writes the medians (us per
call) to bench/results/between_cost.json. Figures from a machine with fewer cores than RANKS + 1
are oversubscribed.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def rank_main(calls: int, rounds: int, out: str) -> None:
    import dpmpi
    import numpy as np

    comm = dpmpi.init()
    x = np.zeros(4)
    rt = dpmpi.Runtime(comm, {"x": x})

    def step(k):
        with rt.update():
            x[0] += k
    rt.run(step, 2)  # (from here on the ranks are between two runs)
    times = {"watched allreduce (with its agreement)": [], "raw comm.mpi.allreduce": [],
             "watched barrier (with its agreement)": [], "raw comm.mpi.barrier": []}
    for _ in range(rounds):  # (alternated: the machine's drift falls on both)
        for name, call in (("watched allreduce (with its agreement)", lambda: comm.allreduce(1)),
                           ("raw comm.mpi.allreduce", lambda: comm.mpi.allreduce(1)),
                           ("watched barrier (with its agreement)", lambda: comm.barrier()),
                           ("raw comm.mpi.barrier", lambda: comm.mpi.barrier())):
            comm.mpi.barrier()
            t = time.perf_counter()
            for _ in range(calls):
                call()
            times[name].append(1e6 * (time.perf_counter() - t) / calls)
    rt.run(step, 4)
    if comm.Get_rank() == 0:
        med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
        result = {"ranks": comm.Get_size(), "calls": calls, "rounds": rounds, "cpus": os.cpu_count(),
                  "oversubscribed": comm.Get_size() + 1 > (os.cpu_count() or 1), "median_us": med,
                  "rounds_us": times}
        with open(out, "w") as f:
            json.dump(result, f, indent=1)
        print(json.dumps(med))
    rt.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--calls", type=int, default=400)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", default=os.path.join(HERE, "results", "between_cost.json"))
    a = p.parse_args()
    if a.rank:
        rank_main(a.calls, a.rounds, a.out)
        return
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    run = os.path.join(os.path.dirname(sys.executable), "dpmpi-run")
    cmd = [run, "-n", str(a.ranks + 1), "--spares", "1", "--", sys.executable, os.path.abspath(__file__), "--rank",
           "--calls", str(a.calls), "--rounds", str(a.rounds), "--out", os.path.abspath(a.out)]
    sys.exit(subprocess.run(cmd, timeout=600).returncode)


if __name__ == "__main__":
    main()
