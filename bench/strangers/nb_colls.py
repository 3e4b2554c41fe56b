"""A stranger's program: nonblocking collectives of several kinds in flight together
(``Iallgather``, ``Iscan``, ``Ialltoallv``, ``Ibcast``), finished with one ``Waitall``.
    ACTIVE=1 HI=2.5 bench/strangers/loop.sh nb_colls.py 3000 8"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
x = np.random.default_rng(21 + r).random(1 << 12)
rt = dpmpi.Runtime(comm, {"x": x})

def step(k):
    a = np.empty(n)
    sc = np.empty(1)
    counts = np.array([1 + (r + j + k) % 5 for j in range(n)])
    rcounts = np.array([1 + (j + r + k) % 5 for j in range(n)])
    sbuf = np.resize(x, counts.sum())
    rbuf = np.empty(rcounts.sum())
    b = np.array([x[k % x.size]]) if r == k % n else np.empty(1)
    reqs = [comm.Iallgather(np.array([x.mean()]), a),
            comm.Iscan(np.array([x.max()]), sc, op=MPI.SUM),
            comm.Ialltoallv([sbuf, counts], [rbuf, rcounts]),
            comm.Ibcast(b, root=k % n)]
    MPI.Request.Waitall(reqs)
    with rt.update():
        x[:] = np.cos(x * 2.3 + a.sum()) * 0.5 + 0.5
        x[1] = (sc[0] + rbuf.sum() + b[0]) % 1.0

rt.run(step, steps)
h = hashlib.sha256(x.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
