"""A stranger's program (written from the README only): tensor-parallel style groups set up
before the loop. The ranks form groups of two (``comm.Split``) and a second communicator of the
groups' leaders; each group's first rank draws the group's initial weights and broadcasts them
over the group (``Bcast``), the group agrees on a scale (``allreduce``), the leaders exchange
their group's norm (``allgather``), a node-local communicator agrees on a seed (``bcast``), all
before the Runtime takes its first snapshot. The steps reduce over the group and over ``comm``.
Killed from outside at a random time, a replacement must redo the setup's calls on the groups.
Prints the ranks' digests on rank 0.
    ACTIVE=1 LO=0.6 HI=2.5 bench/strangers/loop.sh row_setup.py 300 12"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
group = comm.Split(r // 2, r)
leaders = comm.Split(0 if group.Get_rank() == 0 else MPI.UNDEFINED, r)
node = comm.Split_type(MPI.COMM_TYPE_SHARED, r)

w = np.zeros((256, 256))
if group.Get_rank() == 0:
    w[...] = np.random.default_rng(100 + r).standard_normal(w.shape)
group.Bcast(w, root=0)
scale = group.allreduce(float(np.abs(w).mean()), op=MPI.MAX)
norms = leaders.allgather(float(np.linalg.norm(w))) if leaders != MPI.COMM_NULL else None
norm = group.bcast(sum(norms) if norms else None, root=0)
seed = node.bcast(1234 + r, root=0)
group.Barrier()
w /= scale * norm
x = np.random.default_rng(seed).standard_normal(w.shape[0])
state = {"w": w, "x": x}
rt = dpmpi.Runtime(comm, state, snapshot_every=5)


def step(k):
    y = np.tanh(w @ x)
    g = np.empty_like(y)
    group.Allreduce(y, g, op=MPI.SUM)
    total = comm.allreduce(float(g.sum()))
    with rt.update():
        x[...] = 0.9 * x + 0.1 * g / group.Get_size()
        w[...] += 1e-4 * np.outer(g, x) - 1e-6 * total


rt.run(step, steps)
h = hashlib.sha256(w.tobytes() + x.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": hashlib.sha256("".join(d).encode()).hexdigest()[:16],
                      "recoveries": len(rt.history)}))
rt.close()
