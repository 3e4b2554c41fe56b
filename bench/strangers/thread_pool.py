"""A stranger's program (written from the README only): the state is updated by a thread pool
(``concurrent.futures.ThreadPoolExecutor``; numpy releases the GIL), each worker writing its own
slice of the weights in place inside ``rt.update()``, and the gradient is computed by the pool
too. The update is long (most of the step), so kills land in it. Prints the ranks' digests on
rank 0. ``PASSES`` (environment, default 6): passes of the update over its slice.
    bench/strangers/loop.sh thread_pool.py 400 20
    PASSES=60 bench/strangers/loop.sh thread_pool.py 30 8     (a long update: most kills land in it)"""
import hashlib
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 400
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
N, P, PASSES = 1 << 20, 4, int(os.environ.get("PASSES", "6"))
w = np.random.default_rng(3).standard_normal(N)
m = np.zeros(N)
rt = dpmpi.Runtime(comm, {"w": w, "m": m})
pool = ThreadPoolExecutor(P)
parts = [slice(i * N // P, (i + 1) * N // P) for i in range(P)]


def grad_part(s, k):
    return np.sin(w[s] * (1 + 0.01 * r) + 0.001 * k)


def update_part(s, g):
    for _ in range(PASSES):                  # several in-place passes over the slice
        m[s] *= 0.9
        m[s] += g[s]
        w[s] -= 1e-3 * m[s]
        np.tanh(w[s], out=w[s])


def step(k):
    g = np.concatenate(list(pool.map(grad_part, parts, [k] * P)))
    comm.Allreduce(MPI.IN_PLACE, g)
    g /= n
    with rt.update():
        list(pool.map(update_part, parts, [g] * P))


rt.run(step, steps)
pool.shutdown()
h = hashlib.sha256(w.tobytes() + m.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
