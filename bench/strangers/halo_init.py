"""A stranger's program (written from the README only): a 1-D heat equation written the way many
MPI codes are, with point-to-point messages in the setup. Rank 0 "reads" the parameters and
sends them to every other rank one by one (``send``/``recv``); each rank tells its neighbours its
cell count (``sendrecv``), and the ghost cells are filled once before the loop (``Sendrecv``
both ways). The loop exchanges halos with ``Sendrecv`` under dpmpi.Runtime. Before the
forty-fifth session a replacement raised ReplayError at its first ``recv`` of the setup (or the
job hung), so no death could be recovered. Prints the ranks' digests on rank 0.
    ACTIVE=1 LO=0.4 HI=3 bench/strangers/loop.sh halo_init.py 20000 12"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
if r == 0:
    params = {"alpha": 0.21, "cells": [3000 + 500 * q for q in range(n)], "source": 2.5e-4}
    for q in range(1, n):
        comm.send(params, dest=q, tag=1)
else:
    params = comm.recv(source=0, tag=1)
left = r - 1 if r > 0 else MPI.PROC_NULL
right = r + 1 if r < n - 1 else MPI.PROC_NULL
mine = params["cells"][r]
from_left = comm.sendrecv(mine, dest=right, sendtag=2, source=left, recvtag=2)
from_right = comm.sendrecv(mine, dest=left, sendtag=3, source=right, recvtag=3)
assert from_left in (None, params["cells"][r - 1] if r > 0 else None)
start = sum(params["cells"][:r])
u = np.zeros(mine + 2)  # (two ghost cells)
u[1:-1] = np.sin(np.pi * (start + np.arange(mine)) / sum(params["cells"]))
comm.Sendrecv(u[1:2].copy(), dest=left, sendtag=4, recvbuf=u[-1:], source=right, recvtag=4)
comm.Sendrecv(u[-2:-1].copy(), dest=right, sendtag=5, recvbuf=u[:1], source=left, recvtag=5)
rt = dpmpi.Runtime(comm, {"u": u}, snapshot_every=5)


def step(k):
    comm.Sendrecv(u[1:2].copy(), dest=left, sendtag=6, recvbuf=u[-1:], source=right, recvtag=6)
    comm.Sendrecv(u[-2:-1].copy(), dest=right, sendtag=7, recvbuf=u[:1], source=left, recvtag=7)
    lap = u[:-2] - 2 * u[1:-1] + u[2:]
    with rt.update():
        u[1:-1] += params["alpha"] * lap + params["source"]


rt.run(step, steps)
d = comm.gather(hashlib.sha256(u[1:-1].tobytes()).hexdigest()[:16], root=0)
if r == 0:
    sys.stdout.write(json.dumps({"digest": d, "recoveries": len(rt.history),
                                 "sizes": [from_left, from_right]}) + "\n")
