"""A stranger's program (written from the README only): a node-local communicator
(Split_type(COMM_TYPE_SHARED)) and a periodic Cartesian ring (Create_cart), both made once before
a dpmpi.Runtime loop, used in every step for a node-local reduction and a neighbour exchange
(before the fourteenth session such communicators hung the job at its first failure). Prints the
ranks' digests on rank 0.
    bench/strangers/loop.sh node_local.py 3000 20"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=r)
ring = comm.Create_cart([n], periods=[True])
u = np.cos(np.arange(50_000) * (r + 1) * 1e-4)
rt = dpmpi.Runtime(comm, {"u": u})


def step(k):
    src, dst = ring.Shift(0, 1)
    edge = np.empty(1)
    ring.Sendrecv(u[-1:].copy(), dest=dst, recvbuf=edge, source=src)
    local = np.array([u.sum()])
    total = np.empty(1)
    node.Allreduce(local, total)
    with rt.update():
        u[1:] = 0.5 * (u[1:] + u[:-1])
        u[0] = 0.5 * (u[0] + edge[0]) + 1e-9 * total[0]


rt.run(step, steps)
d = comm.gather(hashlib.sha256(u.tobytes()).hexdigest()[:16], root=0)
if r == 0:
    sys.stdout.write(json.dumps({"digest": d, "recoveries": len(rt.history)}) + "\n")
