"""A stranger's program (written from the README only): a long prologue before the first run.
The Runtime is made first; then each rank "loads" its data shard in pieces (compute), with an
Allreduce of the shard's statistics after each piece, rank 0's initial weights are broadcast
(Bcast) with a pickled vocabulary (bcast); then the training run. Killed from outside at a
random time, the death often lands in the prologue. Prints the ranks' digests on rank 0.
    LO=0.3 HI=4 bench/strangers/loop.sh long_prologue.py 40 20"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
W = np.zeros((512, 64))
b = np.zeros(64)
rt = dpmpi.Runtime(comm, {"W": W, "b": b}, snapshot_every=2)

stats = np.zeros(2)
shard = []
for piece in range(8):  # ~2 s of "loading" per rank
    m = np.random.default_rng(100 * r + piece).standard_normal((300, 300))
    for _ in range(12):
        m = np.tanh(m @ m.T / 300)
    x = m[:64, :].T.copy()  # 300 samples of 64 features... then 512 inputs below
    shard.append(np.repeat(x, 8, axis=1)[:, :512])
    s = np.array([x.sum(), (x * x).sum()])
    comm.Allreduce(MPI.IN_PLACE, s, op=MPI.SUM)
    stats += s
data = np.concatenate(shard)
mean = stats[0] / (n * data.size / 8)
if r == 0:
    W[...] = np.random.default_rng(5).standard_normal(W.shape) * 0.05
comm.Bcast(W, root=0)
vocab = comm.bcast({f"tok{i}": i for i in range(100)} if r == 0 else None, root=0)
label_of = np.array([vocab[f"tok{i % 100}"] % 64 for i in range(len(data))])


def step(k):
    idx = np.random.default_rng(k * 1000 + r).integers(0, len(data), 128)
    x, y = data[idx] - mean, label_of[idx]
    logits = x @ W + b
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(128), y] -= 1.0
    gW, gb = x.T @ p / 128, p.sum(axis=0) / 128
    comm.Allreduce(MPI.IN_PLACE, gW, op=MPI.SUM)
    comm.Allreduce(MPI.IN_PLACE, gb, op=MPI.SUM)
    with rt.update():
        W[...] -= 0.05 * gW / n
        b[...] -= 0.05 * gb / n


rt.run(step, steps)
h = hashlib.sha256(W.tobytes() + b.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
