"""A dpmpi.Runtime program whose step catches every exception itself and goes on: an
``except Exception`` around its Allreduce, and with --all around the whole step, ``rt.update()``
included (a pattern common in production code). A peer's failure it swallowed must still end
that step in a recovery, the result bit for bit the failure-free one (integer state: the
expected value is computed without MPI, ``expected``). tests/test_workloads.py"""
import argparse
import hashlib
import json
import time

import numpy as np

N = 1000


def contribution(k: int, rank: int) -> np.ndarray:
    return (np.arange(N, dtype=np.int64) * (k + 1) + 7 * rank) % 1009


def update(x: np.ndarray, s: np.ndarray) -> None:
    x[...] = (x * 3 + s) % 1000003


def digest(x: np.ndarray) -> str:
    return hashlib.sha256(x.tobytes()).hexdigest()[:16]


def expected(steps: int, size: int) -> str:
    x = np.zeros(N, dtype=np.int64)
    for k in range(steps):
        update(x, sum(contribution(k, r) for r in range(size)))
    return digest(x)


def main() -> None:
    import dpmpi

    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--all", action="store_true", help="the whole step inside the try, rt.update() too")
    p.add_argument("--no-interrupt", action="store_true",
                   help="Runtime(interrupt=False): failures seen in MPI calls only")
    args = p.parse_args()
    comm = dpmpi.init()
    r = comm.Get_rank()
    x = np.zeros(N, dtype=np.int64)
    rt = dpmpi.Runtime(comm, {"x": x}, snapshot_every=2, interrupt=not args.no_interrupt)
    swallowed: list[int] = []

    def body(k: int) -> None:
        s = np.zeros(N, dtype=np.int64)
        try:
            time.sleep(0.1)  # the step's compute (the test's kill lands 30 ms into it: noticed here, inside the try)
            comm.Allreduce(contribution(k, r), s)
        except Exception:
            swallowed.append(k)
        with rt.update():
            update(x, s)

    def step(k: int) -> None:
        if not args.all:
            return body(k)
        try:
            body(k)
        except Exception:
            swallowed.append(k)

    rt.run(step, args.steps)
    print(json.dumps({"event": "final", "rank": r, "digest": digest(x), "role": comm.role.value,
                      "swallowed": sorted(set(swallowed)), "recoveries": len(rt.history)}), flush=True)


if __name__ == "__main__":
    main()
