"""A stranger's program on the GPU path, written from the README and docs/gpu.md: momentum
updates on device arrays (CuPy; the fake backend where there is no GPU), a host array beside
them, gradients' heads summed over MPI through host memory, a warm spare.

    DPMPI_GPU_BACKEND=fake dpmpi-run -n 5 --spares 1 -- python device_state.py STEPS
"""
import hashlib
import json
import sys
import time

import numpy as np
from mpi4py import MPI

import dpmpi
from dpmpi.gpu import get_backend

steps = int(sys.argv[1])
comm = dpmpi.init(wait=False)
be = get_backend()
n = 1 << 18
state = {"x": be.zeros(n, "float64"), "v": be.zeros(n, "float64"), "seen": np.zeros(1024)}
rt = dpmpi.Runtime(comm, state, same_start=True)  # every rank starts from zeros
comm.Await()


def step(k):
    rng = np.random.default_rng([k, comm.Get_rank()])
    g = be.asarray(rng.standard_normal(n))
    head = np.ascontiguousarray(be.to_numpy(g[:1024]))
    comm.Allreduce(MPI.IN_PLACE, head)
    with rt.update():
        state["v"] *= 0.9
        state["v"] += g
        state["x"] += 0.01 * state["v"]
        state["seen"] += head
    time.sleep(0.01)


rt.run(step, steps)
h = hashlib.sha256()
for name in sorted(state):
    h.update(np.ascontiguousarray(be.to_numpy(state[name])).tobytes())
d = comm.gather(h.hexdigest()[:16], root=0)
if comm.Get_rank() == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
