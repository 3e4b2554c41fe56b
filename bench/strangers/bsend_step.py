"""A stranger's program: buffered sends (``Attach_buffer`` once at the start, ``Bsend`` in every
step) around a ring, as older codes written against MPI-1 do.
    ACTIVE=1 HI=2.5 bench/strangers/loop.sh bsend_step.py 3000 8"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
x = np.random.default_rng(8 + r).random(1 << 12)
buf = bytearray(1 << 20)
MPI.Attach_buffer(buf)
rt = dpmpi.Runtime(comm, {"x": x})

def step(k):
    comm.Bsend(x[:256], dest=(r + 1) % n, tag=k % 50)
    got = np.empty(256)
    comm.Recv(got, source=(r - 1) % n, tag=k % 50)
    s = comm.allreduce(float(got.sum()))
    with rt.update():
        x[:] = 3.8 * x * (1 - x)
        x[2] = s % 1.0

rt.run(step, steps)
MPI.Detach_buffer()
h = hashlib.sha256(x.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
