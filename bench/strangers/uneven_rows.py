"""A stranger's program (written from the README only): rank 0 "reads" a dense matrix whose rows do
not divide evenly among the ranks and hands each rank its rows with ``comm.Scatterv`` (counts and
displacements), the ranks sum a row-scaling vector with ``comm.Reduce_scatter`` (each its own
rows' part) and swap their row counts with ``comm.Alltoallv``; then power iteration, the vector
put together with ``comm.Allgatherv`` every step, and the eigenvector gathered to rank 0 with
``comm.Gatherv`` at the end. Before the forty-fifth session a replacement raised ReplayError at
the setup's Scatterv (only the v-variant Allgatherv was answered from the survivors' record), so
every spare was lost and the job went on with fewer ranks (then failed at the next Allgatherv,
whose counts name 4 ranks). Prints the digest on rank 0.
    ACTIVE=1 LO=0.4 HI=3 bench/strangers/loop.sh uneven_rows.py 3000 12"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
size = 1001  # rows and columns: not a multiple of the ranks
counts = np.array([size // n + (q < size % n) for q in range(n)])
starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
matrix = None
if r == 0:
    rng = np.random.default_rng(11)
    half = rng.standard_normal((size, size)) / size
    matrix = half + half.T  # (symmetric: real eigenvalues)
rows = np.empty((counts[r], size))
comm.Scatterv([matrix, counts * size, starts * size, MPI.DOUBLE] if r == 0 else None, rows, root=0)
scale = np.empty(counts[r])  # every rank proposes a scaling of all rows; each gets the sum of its own rows'
comm.Reduce_scatter(np.linspace(1.0, 1.5, size) * (1 + 0.01 * r), scale, recvcounts=counts, op=MPI.SUM)
rows *= (scale / n)[:, None]
told = np.empty(n, dtype=np.int64)  # (every rank tells every other its row count: a check)
comm.Alltoallv([np.full(n, counts[r], dtype=np.int64), [1] * n], [told, [1] * n])
assert told.tolist() == counts.tolist()
vec = np.ones(size) / np.sqrt(size)
value = np.zeros(1)
rt = dpmpi.Runtime(comm, {"vec": vec, "value": value})


def step(k):
    mine = rows @ vec
    whole = np.empty(size)
    comm.Allgatherv(mine, [whole, counts, starts, MPI.DOUBLE])
    norm = np.sqrt(comm.allreduce(float(mine @ mine)))
    with rt.update():
        value[0] = float(vec @ whole)
        vec[:] = whole / norm


rt.run(step, steps)
out = np.empty(size) if r == 0 else None
comm.Gatherv(vec[starts[r]:starts[r] + counts[r]], [out, counts, starts, MPI.DOUBLE] if r == 0 else None, root=0)
if r == 0:
    digest = hashlib.sha256(out.tobytes() + value.tobytes()).hexdigest()[:16]
    sys.stdout.write(json.dumps({"digest": digest, "recoveries": len(rt.history)}) + "\n")
