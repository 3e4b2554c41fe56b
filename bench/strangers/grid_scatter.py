"""A stranger's program (written from the README only): a 2 x 2 grid of ranks, rows and columns
made with ``comm.Split`` before the loop. Each row's first rank reads the row's block of data and
scatters it over the row (``Scatter``), and its settings (``scatter`` of dicts); each column's
second rank gathers the column's norms (``gather``) and the column sums its blocks onto it
(``Reduce``), which picks the column's scale; all before the Runtime's first snapshot. Between
two runs the rows reduce their loss onto their first rank (``reduce``). Killed from outside at a
random time, a replacement must redo the setup's rooted calls on the rows and columns (before
the forty-third session: ReplayError, and the job went on without it). Prints the ranks'
digests on rank 0.
    ACTIVE=1 LO=0.6 HI=2.5 bench/strangers/loop.sh grid_scatter.py 10000 12"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
row, col = comm.Split(r // 2, r), comm.Split(r % 2, r)

block = np.empty((128, 128))
whole = None
if row.Get_rank() == 0:  # the row's data, as read from a file
    whole = np.random.default_rng(7 + r).standard_normal((row.Get_size(), 128, 128))
row.Scatter(whole, block, root=0)
cfg = row.scatter([{"lr": 1e-3 * (k + 1), "seed": 100 + 10 * r + k} for k in range(row.Get_size())]
                  if row.Get_rank() == 0 else None, root=0)
norms = col.gather(float(np.linalg.norm(block)), root=1)
summed = np.zeros_like(block)
col.Reduce(block, summed, op=MPI.SUM, root=1)
scale = col.bcast(max(norms) + float(np.abs(summed).mean()) if col.Get_rank() == 1 else None, root=1)
w = block / scale
x = np.random.default_rng(cfg["seed"]).standard_normal(128)
state = {"w": w, "x": x}
rt = dpmpi.Runtime(comm, state, snapshot_every=5)


def step(k):
    y = np.tanh(w @ x)
    g = np.empty_like(y)
    row.Allreduce(y, g, op=MPI.SUM)
    total = comm.allreduce(float(g.sum()))
    with rt.update():
        x[...] = 0.9 * x + 0.1 * g / row.Get_size()
        w[...] += cfg["lr"] * 1e-2 * np.outer(g, x) - 1e-6 * total


rt.run(step, steps // 2)
loss = row.reduce(float(np.square(x).sum()), root=0)
if loss is not None:
    x *= 1.0 / (1.0 + 1e-3 * loss)
rt.run(step, steps)
h = hashlib.sha256(w.tobytes() + x.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": hashlib.sha256("".join(d).encode()).hexdigest()[:16],
                      "recoveries": len(rt.history)}))
rt.close()
