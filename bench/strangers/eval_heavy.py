"""A stranger's program (written from the README only): training in epochs (one rt.run call
each) with a long evaluation between them, a third of the time, made of what such code usually
holds: per-batch validation losses summed to rank 0 (comm.reduce), rank 0's early-stopping
decision broadcast back (comm.bcast), a metrics array allreduced in place (comm.Allreduce), and
the learning rate lowered from it (a state array changed between runs). Before the eighteenth
session a kill that landed in the evaluation raised ProcFailedError in this code and ended the
job. Prints the ranks' digests on rank 0.
    bench/strangers/loop.sh eval_heavy.py 30 20"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

per = int(sys.argv[1]) if len(sys.argv) > 1 else 30
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
W = np.random.default_rng(9).standard_normal((192, 192)) / 14
lr = np.array([0.05])
rt = dpmpi.Runtime(comm, {"W": W, "lr": lr})


def loss(k, which):
    x = np.random.default_rng([which, k, r]).standard_normal((64, 192))
    for _ in range(6):  # (a heavier forward pass than the training step's)
        x = np.tanh(x @ W)
    return x


def step(k):
    x = np.random.default_rng([0, k, r]).standard_normal((32, 192))
    y = np.tanh(x @ W)
    g = x.T @ ((y - x) * (1 - y ** 2)) / 32
    comm.Allreduce(MPI.IN_PLACE, g)
    with rt.update():
        W[...] -= lr[0] * g / n


history, stop = [], False
for epoch in range(5):
    rt.run(step, (epoch + 1) * per)
    total = 0.0
    for b in range(12):  # validation batches
        part = comm.reduce(float((loss(b, 1 + epoch) ** 2).mean()), op=MPI.SUM, root=0)
        total += part if r == 0 else 0.0
    stop = comm.bcast(r == 0 and len(history) > 2 and total > history[-1], root=0)
    metrics = np.array([total, float(np.abs(W).mean()), float(lr[0])])
    comm.Allreduce(MPI.IN_PLACE, metrics)
    history.append(metrics[0] / n)
    if len(history) > 1 and history[-1] > 0.999 * history[-2]:
        lr[0] *= 0.7
    if stop:
        break
h = hashlib.sha256(W.tobytes() + lr.tobytes() + np.array(history).tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
