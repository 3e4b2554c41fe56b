"""A stranger's program (written from the README only): a 2-D process grid whose row and column
communicators are made in the prologue, after a long load, with the Runtime made first (as the
README says, so that a death in the prologue is repaired). Each rank "loads" its block for ~2 s,
then the grid's rows and columns are split off `comm`, the block's mean is Allreduced over its row,
and the run smooths the block with its row's and column's sums. Killed from outside at a random
time, the death often lands in the load, so the survivors meet it in the prologue's Split.
Prints the ranks' digests on rank 0.
    ACTIVE=1 LO=0.3 HI=3 bench/strangers/loop.sh prologue_split.py 40 20"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
cols = 2 if n % 2 == 0 else 1
block = np.zeros((64, 64))
rt = dpmpi.Runtime(comm, {"block": block}, snapshot_every=4)

base = np.random.default_rng(r).standard_normal((300, 300))
m = base.copy()
for _ in range(500):  # the load: ~2 s per rank
    m = np.tanh(m @ m.T / 300 + 0.5 * base)
block[...] = m[:64, :64]
row = comm.Split(r // cols, r)
col = comm.Split(r % cols, r)
# (a derived communicator's collective here would draw dpmpi's warning: a replacement cannot redo it)
means = comm.allgather(float(block.mean()))
mean = sum(means[i] for i in range(n) if i // cols == r // cols) / row.Get_size()


def step(k):
    rs = np.empty_like(block)
    cs = np.empty_like(block)
    row.Allreduce(block, rs, op=MPI.SUM)
    col.Allreduce(block, cs, op=MPI.SUM)
    with rt.update():
        block[...] = 0.5 * block + 0.25 * rs / row.Get_size() + 0.25 * cs / col.Get_size() - 0.01 * mean


rt.run(step, steps)
h = hashlib.sha256(block.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": hashlib.sha256("".join(d).encode()).hexdigest()[:16],
                      "recoveries": len(rt.history)}))
rt.close()
