"""A stranger's program (written from the README only): communicators made once with info hints
before a dpmpi.Runtime loop (a Dup_with_info for the halo exchange, a node-local
Split_type(COMM_TYPE_SHARED, info=...) for a reduction), used in every step. Before the sixteenth
session Split_type with info raised a ValueError and Dup_with_info made a communicator that no
repair rebuilt. Prints the ranks' digests on rank 0.
    bench/strangers/loop.sh info_comms.py 3000 20"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
info = MPI.Info.Create()
info.Set("mpi_assert_no_any_source", "true")
halo = comm.Dup_with_info(info)
node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=r, info=info)
info.Free()
u = np.sin(np.arange(50_000) * (r + 1) * 1e-4)
rt = dpmpi.Runtime(comm, {"u": u})


def step(k):
    edge = np.empty(1)
    halo.Sendrecv(u[-1:].copy(), dest=(r + 1) % n, recvbuf=edge, source=(r - 1) % n)
    total = np.empty(1)
    node.Allreduce(np.array([u.sum()]), total)
    with rt.update():  # a damped wave that takes in its left neighbour's last value
        np.multiply(u, 0.999, out=u)
        u[0] += 1e-3 * edge[0]
        u[-1] -= 1e-9 * total[0]


history = rt.run(step, steps)
digests = comm.gather(hashlib.sha256(u.tobytes()).hexdigest()[:16], root=0)
if r == 0:
    print(json.dumps({"digest": digests, "recoveries": len(history)}), flush=True)
