"""A stranger's program: a communicator made with the nonblocking ``Idup`` in every step (its
request waited on with another operation's), used and freed, as libraries that overlap their
set-up do.
    ACTIVE=1 HI=2.5 bench/strangers/loop.sh idup_step.py 3000 8
It failed without any kill (MPI_ERR_TRUNCATE in NBC_Progress) until the forty-eighth session
(dpmpi.pending_dups; then an Idup of dpmpi.init's communicator became a Dup that repairs rebuild)."""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
comm = dpmpi.init()
r = comm.Get_rank()
x = np.random.default_rng(3 + r).random(1 << 12)
rt = dpmpi.Runtime(comm, {"x": x})

def step(k):
    dup, req = comm.Idup()
    s = np.zeros(1)
    r2 = comm.Iallreduce(np.array([x.sum()]), s, op=MPI.SUM)
    MPI.Request.Waitall([req, r2])
    t = np.zeros(1)
    dup.Allreduce(np.array([x[k % x.size]]), t, op=MPI.MAX)
    dup.Free()
    with rt.update():
        x[:] = 3.7 * x * (1 - x)
        x[0] = (s[0] + t[0]) % 1.0

rt.run(step, steps)
h = hashlib.sha256(x.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
