"""A stranger's program (written from the README only): training in two phases, each with its
own ``dpmpi.Runtime``: a warm-up phase on the weights alone, then a phase with momentum and a
running average added to the state (a second Runtime over more arrays, another snapshot
interval). The first Runtime is left as it is. Prints the ranks' digests on rank 0.
    bench/strangers/loop.sh two_phases.py 120 20"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 120
warm = steps // 3
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
w = np.random.default_rng(7).standard_normal(200_000)   # the same on every rank
x = np.random.default_rng(100 + r).standard_normal((64, 200))


def grad(k):
    batch = np.roll(x, k, axis=0)
    g = np.tile((batch @ w[:200].reshape(200, 1)).ravel(), w.size // 64 + 1)[: w.size]
    g = np.tanh(g) * 1e-3 + 1e-4 * w
    comm.Allreduce(MPI.IN_PLACE, g)
    return g / n


rt1 = dpmpi.Runtime(comm, {"w": w})


def warmup(k):
    g = grad(k)
    with rt1.update():
        w[...] -= 0.05 * g


rt1.run(warmup, warm)
first = comm.allreduce(float(np.abs(w).sum()))            # between the phases
m = np.zeros_like(w)
avg = np.array(w)
seen = np.zeros(1, dtype=np.int64)
rt2 = dpmpi.Runtime(comm, {"w": w, "m": m, "avg": avg, "seen": seen}, snapshot_every=2)


def train(k):
    g = grad(k + warm)
    with rt2.update():
        m[...] = 0.9 * m + g
        w[...] -= 0.02 * m
        seen[0] += 1
        avg[...] += (w - avg) / (seen[0] + 1)


rt2.run(train, steps - warm)
h = hashlib.sha256(w.tobytes() + m.tobytes() + avg.tobytes() + seen.tobytes()
                   + np.float64(first).tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt1.history) + len(rt2.history)}), flush=True)
