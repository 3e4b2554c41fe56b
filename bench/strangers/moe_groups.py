"""A stranger's program (written from the README only): a toy mixture of experts. The ranks form
two expert groups (``comm.Split`` by parity); each group's first rank "loads" its experts and
hands each member its uneven share with ``Scatterv``. Every step routes tokens to the ranks that
hold their expert with ``Alltoallv`` (counts from an ``alltoall``), applies the experts, and
averages the gradients within the group (``Allreduce``). Between the epochs (three ``rt.run``
calls) each group gathers its members' expert norms to its first rank with ``Gatherv``, the
groups' leaders' sums meet in a ``reduce`` on ``comm``, and rank 0 broadcasts a new learning
rate, kept in the state. Prints the digests on rank 0.
    ACTIVE=1 LO=0.5 HI=4 bench/strangers/loop.sh moe_groups.py 60 12"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

per_epoch = int(sys.argv[1]) if len(sys.argv) > 1 else 60
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
group = comm.Split(r % 2, r)
g, gn = group.Get_rank(), group.Get_size()
dim = 32
experts_per = [2 + q for q in range(gn)]  # uneven: member q holds 2 + q experts
starts = np.concatenate([[0], np.cumsum(experts_per)[:-1]])
allw = None
if g == 0:
    allw = np.random.default_rng(100 + r).standard_normal((sum(experts_per), dim, dim)) / dim
mine = np.empty((experts_per[g], dim, dim))
block = dim * dim
group.Scatterv([allw, [c * block for c in experts_per], [s * block for s in starts], MPI.DOUBLE] if g == 0
               else None, mine, root=0)
lr = np.array([0.05])
rt = dpmpi.Runtime(comm, {"mine": mine, "lr": lr}, snapshot_every=3)


def step(k):
    rng = np.random.default_rng([k, r])
    tokens = rng.standard_normal((64, dim))
    dest = rng.integers(0, n, 64)  # the rank holding each token's expert
    order = np.argsort(dest, kind="stable")
    send_counts = np.bincount(dest, minlength=n)
    recv_counts = np.array(comm.alltoall([int(c) for c in send_counts]))
    out = tokens[order].copy()
    got = np.empty((int(recv_counts.sum()), dim))
    comm.Alltoallv([out, send_counts * dim], [got, recv_counts * dim])
    y = np.tanh(got @ mine[k % len(mine)])
    grad = np.zeros_like(mine)
    grad[k % len(mine)] = got.T @ y / max(len(got), 1)
    flat = np.zeros((max(experts_per), dim, dim))
    flat[:len(mine)] = grad
    group.Allreduce(MPI.IN_PLACE, flat)  # (a group-mean stand-in, padded to the largest share)
    with rt.update():
        mine[...] -= lr[0] * flat[:len(mine)] / gn


for epoch in range(3):
    rt.run(step, (epoch + 1) * per_epoch)
    norms = np.array([np.linalg.norm(e) for e in mine])
    allnorms = np.empty(sum(experts_per)) if g == 0 else None
    group.Gatherv(norms, [allnorms, experts_per, starts, MPI.DOUBLE] if g == 0 else None, root=0)
    total = comm.reduce(float(allnorms.sum()) if g == 0 else 0.0, root=0)
    lr[0] = comm.bcast(0.05 / (1.0 + 0.1 * total) if r == 0 else None, root=0)
d = comm.gather(hashlib.sha256(mine.tobytes() + lr.tobytes()).hexdigest()[:16], root=0)
if r == 0:
    sys.stdout.write(json.dumps({"digest": d, "recoveries": len(rt.history)}) + "\n")
