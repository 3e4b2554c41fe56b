"""A stranger's program (written from docs/runtime.md, which says to make the Runtime before the
setup's collectives): tensor-parallel pairs (``comm.Split(r // 2)``) and data-parallel groups
(``comm.Split(r % 2)``) made first, then a ~1.5 s "load" in 6 pieces, each followed by an
``allreduce`` of the piece's statistics over the pair and an ``Allreduce`` of a histogram over the
data-parallel group; then the pair's first rank ``Bcast``s the pair's initial weights over the
pair. The steps reduce over the pair and over ``comm``. Killed from outside early, the death lands
in the load: in a collective on a pair or a group. Prints the ranks' digests on rank 0.
    ACTIVE=1 LO=0.3 HI=2.0 bench/strangers/loop.sh tp_setup.py 300 12"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
comm = dpmpi.init()
state = {"w": np.zeros((128, 128)), "hist": np.zeros(64)}
rt = dpmpi.Runtime(comm, state, snapshot_every=4)  # first: the setup below is covered
w, hist = state["w"], state["hist"]
r = comm.Get_rank()
tp, dp = comm.Split(r // 2, r), comm.Split(r % 2, r)  # tensor-parallel pairs, data-parallel groups

rng = np.random.default_rng(7 + r)
total = 0.0
for piece in range(6):  # the load: ~0.25 s of work per piece
    a = rng.standard_normal((220, 220))
    for _ in range(30):
        a = np.tanh(a @ a.T / 220)
    total += tp.allreduce(float(a.sum()))
    counts = np.histogram(a, bins=64, range=(-1, 1))[0].astype(float)
    dp.Allreduce(MPI.IN_PLACE, counts)
    hist += counts
if tp.Get_rank() == 0:
    w[...] = np.random.default_rng(100 + r).standard_normal(w.shape) * 1e-2
tp.Bcast(w, root=0)
scale = 1.0 / (1.0 + abs(total))


def step(k):
    g = np.tanh(w @ hist[:128 // 2].repeat(2)) * scale
    tp.Allreduce(MPI.IN_PLACE, g)
    loss = comm.allreduce(float(g.sum()))
    with rt.update():
        w[...] += 1e-3 * np.outer(g, g) - 1e-7 * loss
        hist[...] *= 0.999


rt.run(step, steps)
h = hashlib.sha256(w.tobytes() + hist.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": hashlib.sha256("".join(d).encode()).hexdigest()[:16],
                      "recoveries": len(rt.history)}))
rt.close()
