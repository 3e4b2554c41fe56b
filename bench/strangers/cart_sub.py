"""A stranger's program: a 2 x 2 Cartesian grid made once before the loop, with its row and
column communicators from ``cart.Sub`` (as SUMMA-style matrix codes do); every step broadcasts a
block along the row and reduces along the column. Prints the digest of every rank's state."""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
comm = dpmpi.init()
cart = comm.Create_cart([2, 2], periods=[False, False])
row = cart.Sub([False, True])  # the ranks of my row
col = cart.Sub([True, False])  # the ranks of my column
r = comm.Get_rank()
a = np.random.default_rng(3 + r).random(4096)
c = np.zeros(4096)
rt = dpmpi.Runtime(comm, {"a": a, "c": c})


def step(k):
    blk = a.copy() if row.Get_rank() == k % 2 else np.empty_like(a)
    row.Bcast(blk, root=k % 2)
    part = np.empty_like(a)
    col.Allreduce(blk * (1 + col.Get_rank()), part, op=MPI.SUM)
    with rt.update():
        c[:] = 0.5 * c + 1e-3 * part
        a[:] = np.sin(a + c)


rt.run(step, steps)
h = hashlib.sha256(np.concatenate([a, c]).tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
