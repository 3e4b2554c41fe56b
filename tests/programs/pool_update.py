"""A Runtime program whose update runs on a thread pool: the main thread waits in
``Future.result()`` while a worker adds the step's sum to the state in ``--passes`` passes, a
10 ms GIL-released wait after each (a device kernel's place). Exact integer arithmetic: each rank
checks its final state against the failure-free result.

One JSON line per rank at the end: {"event": "final", "rank", "role", "ok", "recoveries"}."""
import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import dpmpi
from mpi4py import MPI

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=10)
p.add_argument("--passes", type=int, default=20)
a = p.parse_args()

comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
w = np.zeros(4096, dtype=np.int64)
rt = dpmpi.Runtime(comm, {"w": w})
pool = ThreadPoolExecutor(1)


def passes(g):
    for _ in range(a.passes):
        w[...] += g
        time.sleep(0.01)


def step(k):
    g = np.full(1, k + 1, dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, g)
    with rt.update():
        pool.submit(passes, int(g[0])).result()


rt.run(step, a.steps)
pool.shutdown()
want = a.passes * n * sum(k + 1 for k in range(a.steps))
print(json.dumps({"event": "final", "rank": r, "role": comm.role.value, "ok": bool((w == want).all()),
                  "recoveries": len(rt.history)}), flush=True)
rt.close()
