"""What dpmpi's fault-tolerant ``Isendrecv`` (an Irecv plus an Isend of a copy of the send
buffer: dpmpi/isendrecv.py) costs against Open MPI's own (``comm.mpi.Isendrecv``, which a peer's
death can leave waiting for ever), and against dpmpi's ``Irecv`` + ``Isend`` + ``Waitall``
(what a program would write instead), for a pair of ranks exchanging one message each way; and
dpmpi's ``Sendrecv_replace`` (made the same way) against Open MPI's (which can segfault after a
failure), each ratio against Open MPI's call of the same name.

    python bench/isendrecv_cost.py [--ranks 2] [--rounds 7]

Launches a dpmpi-run job (RANKS ranks, no spare, no failure); rank 0 writes the medians (us per
exchange) and the ratios to Open MPI's to bench/results/isendrecv_cost.json. Figures from a
machine with fewer cores than RANKS are oversubscribed.
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = (8, 4096, 256 << 10, 8 << 20)  # bytes per message


def rank_main(rounds: int, out: str) -> None:
    import numpy as np
    from mpi4py import MPI

    import dpmpi

    comm = dpmpi.init()
    r, n = comm.Get_rank(), comm.Get_size()
    right, left = (r + 1) % n, (r - 1) % n
    raw = comm.mpi

    def pair():
        reqs = [comm.Irecv(got, left, 1), comm.Isend(send, right, 1)]
        dpmpi.Request.Waitall(reqs)

    kinds = {"dpmpi Isendrecv": lambda: comm.Isendrecv(send, right, 1, got, left, 1).Wait(),
             "Open MPI Isendrecv (comm.mpi)": lambda: raw.Isendrecv(send, right, 1, got, left, 1).Wait(),
             "dpmpi Irecv + Isend + Waitall": pair,
             "dpmpi Sendrecv_replace": lambda: comm.Sendrecv_replace(got, right, 2, left, 2),
             "Open MPI Sendrecv_replace (comm.mpi)": lambda: raw.Sendrecv_replace(got, right, 2, left, 2)}
    result = {"ranks": n, "rounds": rounds, "cpus": os.cpu_count(), "oversubscribed": n > (os.cpu_count() or 1),
              "median_us": {}, "ratio_to_open_mpi": {}}
    for size in SIZES:
        send, got = np.full(size // 8 or 1, float(r)), np.empty(size // 8 or 1)
        calls = max(20, min(2000, (64 << 20) // max(size, 1) // 8))
        times = {k: [] for k in kinds}
        for _ in range(rounds):  # (alternated: the machine's drift falls on all)
            for name, call in kinds.items():
                raw.Barrier()
                t = time.perf_counter()
                for _ in range(calls):
                    call()
                times[name].append(1e6 * (time.perf_counter() - t) / calls)
        assert got[0] == float(left)
        med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
        result["median_us"][str(size)] = med
        base = med["Open MPI Isendrecv (comm.mpi)"]
        ratios = {k: round(v / base, 3) for k, v in med.items() if "Isendrecv" in k or "Isend +" in k}
        base = med["Open MPI Sendrecv_replace (comm.mpi)"]
        ratios.update({k: round(v / base, 3) for k, v in med.items() if "Sendrecv_replace" in k})
        result["ratio_to_open_mpi"][str(size)] = ratios
    if r == 0:
        with open(out, "w") as f:
            json.dump(result, f, indent=1)
        print(json.dumps(result["ratio_to_open_mpi"]))
        print(json.dumps({s: {k: round(v, 1) for k, v in m.items()} for s, m in result["median_us"].items()}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", default=os.path.join(HERE, "results", "isendrecv_cost.json"))
    a = p.parse_args()
    if a.rank:
        rank_main(a.rounds, a.out)
        return
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    run = os.path.join(os.path.dirname(sys.executable), "dpmpi-run")
    cmd = [run, "-n", str(a.ranks), "--", sys.executable, os.path.abspath(__file__), "--rank",
           "--rounds", str(a.rounds), "--out", os.path.abspath(a.out)]
    sys.exit(subprocess.run(cmd, timeout=600).returncode)


if __name__ == "__main__":
    main()
