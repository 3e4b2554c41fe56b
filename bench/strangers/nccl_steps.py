"""A stranger's NCCL program, written from docs/gpu.md: data-parallel steps on device arrays
with a split communicator (pairs), Allreduce, Bcast, Reduce_scatter and Allgather per step, a
warm spare, state in a Runtime. Without a GPU: DPMPI_GPU_BACKEND=fake.

    DPMPI_GPU_BACKEND=fake dpmpi-run -n 5 --spares 1 -- python nccl_steps.py STEPS
"""
import hashlib
import json
import sys
import time

import numpy as np
from mpi4py import MPI

import dpmpi
from dpmpi.gpu import NcclComm, get_backend

steps = int(sys.argv[1])
comm = dpmpi.init(wait=False)
be = get_backend()
n = 4096
state = {"w": be.zeros(n, "float64"), "acc": be.zeros(n // 4, "float64")}
rt = dpmpi.Runtime(comm, state, same_start=True)
comm.Await()
nc = NcclComm(comm)
pair = nc.Split(comm.Get_rank() // 2, comm.Get_rank())


def step(k):
    r, size = comm.Get_rank(), comm.Get_size()
    g = be.asarray(np.random.default_rng([k, r]).standard_normal(n))
    nc.Allreduce(MPI.IN_PLACE, g)
    root = be.asarray(np.full(8, float(k)))
    nc.Bcast(root, k % size)
    part = be.zeros(n // size, "float64")
    nc.Reduce_scatter(g, part, "sum")
    everyone = be.zeros(n, "float64")
    nc.Allgather(part, everyone)
    p = be.zeros(n, "float64")
    pair.Allreduce(g, p)
    with rt.update():
        state["w"] += 1e-3 * (everyone / size) + 1e-6 * p
        state["acc"] += be.asarray(be.to_numpy(everyone)[: n // 4]) * 1e-4 + root[0]
    time.sleep(0.005)


rt.run(step, steps)
h = hashlib.sha256()
for name in sorted(state):
    h.update(np.ascontiguousarray(be.to_numpy(state[name])).tobytes())
d = comm.gather(h.hexdigest()[:16], root=0)
if comm.Get_rank() == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
