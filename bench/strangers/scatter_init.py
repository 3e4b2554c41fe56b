"""A stranger's program (written from the README only): rank 0 "loads" a dataset and hands each
rank its shard (comm.Scatter) and its own sampling seed (comm.scatter), gathers the ranks' host
names for its log (comm.gather), then fits a linear model by SGD on the shards, gradients summed
with Allreduce. Before the eighteenth session a replacement's Scatter raised ReplayError (only
bcast/allreduce/allgather/barrier were answered from the survivors' record), so the job lost the
rank. Prints the ranks' digests on rank 0.
    bench/strangers/loop.sh scatter_init.py 600 20"""
import hashlib
import json
import socket
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
rows, dim = 2000, 64
data = None
if r == 0:  # the whole dataset exists on rank 0 only
    rng = np.random.default_rng(3)
    x = rng.standard_normal((n * rows, dim))
    data = np.hstack([x, x @ rng.standard_normal((dim, 1)) + 0.1 * rng.standard_normal((n * rows, 1))])
shard = np.empty((rows, dim + 1))
comm.Scatter(data, shard, root=0)
seed = comm.scatter([1000 + 17 * q for q in range(n)] if r == 0 else None, root=0)
hosts = comm.gather(socket.gethostname(), root=0)
if r == 0:
    print(f"running on {sorted(set(hosts))}", file=sys.stderr)
w = np.zeros(dim)
rt = dpmpi.Runtime(comm, {"w": w})


def step(k):
    idx = np.random.default_rng([seed, k]).integers(0, rows, 256)
    xb, yb = shard[idx, :dim], shard[idx, dim]
    g = xb.T @ (xb @ w - yb) / 256
    comm.Allreduce(MPI.IN_PLACE, g)
    with rt.update():
        w[...] -= 0.05 * g / n


rt.run(step, steps)
d = comm.gather(hashlib.sha256(w.tobytes()).hexdigest()[:16], root=0)
if r == 0:
    sys.stdout.write(json.dumps({"digest": d, "recoveries": len(rt.history)}) + "\n")
