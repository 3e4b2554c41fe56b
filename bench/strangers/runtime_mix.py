"""A stranger's program (written from the README only, by someone new to dpmpi): a toy field
simulation under dpmpi.Runtime with a derived communicator, a ring of Isend/Irecv completed by
mpi4py's own MPI.Request.Waitall, pickled reduce/bcast, an Allgather, three dtypes, a snapshot
every 3 steps (R=2 in the environment: 2 replicas). Prints the ranks' digests on rank 0.
    bench/strangers/loop.sh runtime_mix.py 300 20"""
import hashlib
import json
import os
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 60
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
half = comm.Split(r % 2, r)          # a derived communicator, made once
rng = np.random.default_rng(1234 + r)
field = rng.standard_normal((2001, 1025)).astype(np.float32)
hist = np.zeros(64, dtype=np.int64)
z = (rng.standard_normal(5000) + 1j * rng.standard_normal(5000)).astype(np.complex128)
rt = dpmpi.Runtime(comm, {"field": field, "hist": hist, "z": z}, snapshot_every=3,
                   replicas=int(os.environ.get("R", "1")))

def step(k):
    # nonblocking ring exchange of a row
    right, left = (r + 1) % n, (r - 1) % n
    out = np.ascontiguousarray(field[k % 2001])
    inc = np.empty_like(out)
    reqs = [comm.Isend(out, dest=right, tag=k), comm.Irecv(inc, source=left, tag=k)]
    MPI.Request.Waitall(reqs)
    s = np.zeros(1, dtype=np.float64)
    half.Allreduce(np.array([float(np.sum(field, dtype=np.float64))]), s, op=MPI.SUM)
    tot = comm.reduce(int(hist.sum()), op=MPI.SUM, root=0)
    tot = comm.bcast(tot, root=0)
    g = np.sort(np.abs(z))[:100].copy()
    allg = np.empty(100 * n)
    comm.Allgather(g, allg)
    scale = np.float32(1e-3) * np.float32(np.tanh(s[0] * 1e-6))
    with rt.update():
        field[k % 2001] = 0.5 * field[k % 2001] + 0.5 * inc
        field[...] *= np.float32(0.999)
        field[...] += scale
        idx = (np.abs(field[:, k % 1025]) * 10).astype(np.int64) % 64
        np.add.at(hist, idx, 1 + (tot % 3))
        z[...] *= np.exp(1j * 1e-3 * (k + float(allg.mean())))

rt.run(step, steps)
h = hashlib.sha256()
for a in (field, hist, z):
    h.update(a.tobytes())
d = comm.gather(h.hexdigest()[:16], root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
