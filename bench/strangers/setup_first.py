"""A stranger's program (written from the README only): the setup comes first, the Runtime
after it, as the arrays' shapes come from the setup's collectives. Rank 0 reads a config and
broadcasts it (bcast); each rank "loads" its shard in pieces (compute) with an Allreduce of
its statistics after each, the feature count is agreed (allreduce), rank 0's initial weights are
broadcast (Bcast); only then the Runtime is made and the training runs. Killed from outside at
a random time, the death often lands in that setup. Prints the ranks' digests on rank 0.
    ACTIVE=1 LO=0.3 HI=2.5 bench/strangers/loop.sh setup_first.py 40 20"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
cfg = comm.bcast({"pieces": 8, "hidden": 64, "lr": 0.05} if r == 0 else None, root=0)

stats = np.zeros(2)
shard = []
for piece in range(cfg["pieces"]):  # ~2 s of "loading" per rank
    m = np.random.default_rng(100 * r + piece).standard_normal((300, 300))
    for _ in range(12):
        m = np.tanh(m @ m.T / 300)
    shard.append(m[:, : 40 + r].copy())
    s = np.array([m.sum(), (m * m).sum()])
    comm.Allreduce(MPI.IN_PLACE, s, op=MPI.SUM)
    stats += s
features = comm.allreduce(min(x.shape[1] for x in shard), op=MPI.MIN)
data = np.concatenate([x[:, :features] for x in shard])
mean = stats[0] / (n * 300 * 300 * cfg["pieces"])
W = np.random.default_rng(5).standard_normal((features, cfg["hidden"])) * 0.05 if r == 0 else \
    np.empty((features, cfg["hidden"]))
comm.Bcast(W, root=0)
b = np.zeros(cfg["hidden"])
rt = dpmpi.Runtime(comm, {"W": W, "b": b}, snapshot_every=2)


def step(k):
    idx = np.random.default_rng([k, r]).integers(0, len(data), 64)
    x = data[idx] - mean
    h = np.tanh(x @ W + b)
    err = (h - np.sin(idx / 7.0)[:, None]) * (1.0 - h * h) / 64
    grads = [x.T @ err, err.sum(axis=0)]
    for g in grads:
        comm.Allreduce(MPI.IN_PLACE, g, op=MPI.SUM)
    with rt.update():
        for arr, g in zip((W, b), grads):
            arr -= cfg["lr"] * g / n


rt.run(step, steps)
h = hashlib.sha256(W.tobytes() + b.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": hashlib.sha256("".join(d).encode()).hexdigest()[:16],
                      "recoveries": len(rt.history)}))
