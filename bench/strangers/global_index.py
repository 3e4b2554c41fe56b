"""A stranger's program (written from the README only): a 1-D field distributed unevenly over the
ranks, each rank's place in the global numbering computed in the setup the usual MPI way
(``offset = comm.exscan(n_local)``, the total from an ``allreduce``, every rank's count from an
``allgather``), and, within pairs of ranks (``comm.Split``), a pair-local offset (``scan``) and
a small ``alltoall`` of each rank's boundary values. Then a diffusion under dpmpi.Runtime whose
source term depends on the global index, halos exchanged with ``Sendrecv``. Before the
forty-fourth session a replacement raised ``ReplayError`` at the ``exscan`` and the job went on
with 3 ranks (exit code 0, other digests). Prints the ranks' digests on rank 0.
    ACTIVE=1 LO=0.4 HI=5 bench/strangers/loop.sh global_index.py 20000 12"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
n_local = 2000 + 700 * r  # uneven
offset = comm.exscan(n_local) or 0
total = comm.allreduce(n_local)
counts = comm.allgather(n_local)
assert sum(counts[:r]) == offset
pair = comm.Split(r // 2, r)
pair_offset = pair.scan(n_local) - n_local
edges = pair.alltoall([float(offset + k) for k in range(pair.Get_size())])

x = np.arange(offset, offset + n_local, dtype=np.float64) / total
u = np.sin(2 * np.pi * x) + 1e-3 * (pair_offset + sum(edges)) / total
src = 1e-4 * np.cos(4 * np.pi * x)
rt = dpmpi.Runtime(comm, {"u": u}, snapshot_every=4)
left = r - 1 if r > 0 else MPI.PROC_NULL
right = r + 1 if r < n - 1 else MPI.PROC_NULL


def step(k):
    lo, hi = np.zeros(1), np.zeros(1)
    comm.Sendrecv(u[-1:].copy(), dest=right, recvbuf=lo, source=left)
    comm.Sendrecv(u[:1].copy(), dest=left, recvbuf=hi, source=right)
    padded = np.concatenate([lo if r > 0 else u[:1], u, hi if r < n - 1 else u[-1:]])
    lap = padded[:-2] - 2 * padded[1:-1] + padded[2:]
    mean = comm.allreduce(float(u.sum())) / total
    with rt.update():
        u[...] += 0.2 * lap + src - 1e-4 * mean


rt.run(step, steps)
d = comm.gather(hashlib.sha256(u.tobytes()).hexdigest()[:16], root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
