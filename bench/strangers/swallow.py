"""A stranger's program (written from the README only): data-parallel training whose gradient
Iallreduce overlaps the next layer's backward pass (as DDP's buckets do), with its communication
guarded by a broad ``except Exception`` that logs and goes on (a pattern common in production
code: here it swallows dpmpi's ProcFailedError). With ALL=1 in the environment the whole step,
``rt.update()`` included, is inside that ``try``. Prints the ranks' digests on rank 0.
    bench/strangers/loop.sh swallow.py 100 20"""
import hashlib
import json
import os
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
init = np.random.default_rng(7)
W1 = init.standard_normal((256, 128)) * 0.05
W2 = init.standard_normal((128, 10)) * 0.05
rt = dpmpi.Runtime(comm, {"W1": W1, "W2": W2}, snapshot_every=2)
swallowed = []


def step(k):
    if os.environ.get("ALL") == "1":
        try:
            guarded(k)
        except Exception as exc:  # everything, the state's update too
            swallowed.append(f"step {k}: {type(exc).__name__} (all)")
    else:
        guarded(k)


def guarded(k):
    data = np.random.default_rng(1000 * k + r)
    x = data.standard_normal((64, 256))
    y = data.integers(0, 10, 64)
    h = np.tanh(x @ W1)
    logits = h @ W2
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(64), y] -= 1.0
    g2 = h.T @ p / 64
    req = comm.Iallreduce(MPI.IN_PLACE, g2, op=MPI.SUM)  # overlaps the first layer's gradient
    g1 = x.T @ ((p @ W2.T) * (1 - h * h)) / 64
    try:
        comm.Allreduce(MPI.IN_PLACE, g1, op=MPI.SUM)
        req.Wait()
    except Exception as exc:  # the stranger's "log it and go on"
        swallowed.append(f"step {k}: {type(exc).__name__}")
    with rt.update():
        W1[...] -= 0.1 * g1 / n
        W2[...] -= 0.1 * g2 / n


rt.run(step, steps)
h = hashlib.sha256(W1.tobytes() + W2.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
print(json.dumps({"rank": r, "swallowed": swallowed}), flush=True)
