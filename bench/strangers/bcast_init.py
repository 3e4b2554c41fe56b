"""A stranger's program (written from the README only): data-parallel training that starts every
rank from rank 0's weights, broadcast before the loop (comm.Bcast), with its learning rate and
a schedule broadcast as Python objects (comm.bcast) and a global batch count (allreduce); Adam-
like moments, gradients summed with Allreduce. Before the seventeenth session a replacement's
Bcast waited for rank 0 while rank 0 waited for it in the restore: the job hung at its first
recovery. Prints the ranks' digests on rank 0.
    bench/strangers/loop.sh bcast_init.py 400 20"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
w = np.random.default_rng(7).standard_normal(200_000) if r == 0 else np.empty(200_000)
comm.Bcast(w, root=0)
hp = comm.bcast({"lr": 0.01, "beta": 0.9, "decay_at": [steps // 3, 2 * steps // 3]} if r == 0 else None, root=0)
batches = comm.allreduce(8 * (r + 1))
m, v = np.zeros_like(w), np.zeros_like(w)
rt = dpmpi.Runtime(comm, {"w": w, "m": m, "v": v})


def step(k):
    x = np.random.default_rng([k, r]).standard_normal(w.size)
    g = (np.tanh(w * x) * x) / batches
    comm.Allreduce(MPI.IN_PLACE, g)
    lr = hp["lr"] * (0.5 ** sum(k >= d for d in hp["decay_at"]))
    with rt.update():
        m[...] = hp["beta"] * m + (1 - hp["beta"]) * g
        v[...] = 0.999 * v + 0.001 * g * g
        w[...] -= lr * m / (np.sqrt(v) + 1e-8)


rt.run(step, steps)
d = comm.gather(hashlib.sha256(w.tobytes() + m.tobytes() + v.tobytes()).hexdigest()[:16], root=0)
if r == 0:
    sys.stdout.write(json.dumps({"digest": d, "recoveries": len(rt.history)}) + "\n")
