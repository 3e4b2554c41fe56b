"""A stranger's program: a communicator split inside every step and freed at its end, as some
codes do. It hung at its next failure until the thirteenth session (the replacement was handed
the communicators the survivors had made and freed, instead of making the step's own with them):
    DPMPI_FAULTS=1:step@40:KILL timeout 60 .venv/bin/dpmpi-run -n 5 --spares 1 -- \
        .venv/bin/python bench/strangers/split_per_step.py 100      # exited 124 (timeout); now 0"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
comm = dpmpi.init()
r = comm.Get_rank()
x = np.random.default_rng(5 + r).random(1 << 14)
rt = dpmpi.Runtime(comm, {"x": x})

def step(k):
    dpmpi.faults.point("step")
    sub = comm.Split(comm.Get_rank() % 2, comm.Get_rank())
    s = np.zeros(1)
    sub.Allreduce(np.array([x.sum()]), s, op=MPI.SUM)
    sub.Free()
    with rt.update():
        x[:] = 3.9 * x * (1 - x)
        x[0] = s[0] % 1.0

rt.run(step, steps)
h = hashlib.sha256(x.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
