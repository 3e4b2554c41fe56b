"""A stranger's program (written from the README only) that ends, as many mpi4py programs do,
with its own MPI.Finalize() (before the fourteenth session such a job failed even without a
failure: the fence of mpi4py's Finalize waited for the idle spare). Prints the ranks' digests on
rank 0.
    bench/strangers/loop.sh finalize_end.py 2000 12"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
comm = dpmpi.init()
r = comm.Get_rank()
w = np.full(20_000, float(r))
rt = dpmpi.Runtime(comm, {"w": w})


def step(k):
    g = np.full_like(w, k + 1.0)
    comm.Allreduce(MPI.IN_PLACE, g)
    with rt.update():
        w[:] -= 0.001 * g


rt.run(step, steps)
d = comm.gather(hashlib.sha256(w.tobytes()).hexdigest()[:16], root=0)
if r == 0:
    sys.stdout.write(json.dumps({"digest": d, "recoveries": len(rt.history)}) + "\n")
MPI.Finalize()
