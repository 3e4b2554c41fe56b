"""A dpmpi.Runtime program that ends with its own MPI.Finalize(), as many mpi4py programs do:
mpi4py's went straight to MPI_Finalize, whose fence waited for the idle spare, and the job failed
even without a failure. Prints each rank's state (a digest of it) before finalizing."""
import hashlib
import json

import dpmpi
import numpy as np
from mpi4py import MPI

comm = dpmpi.init()
r = comm.Get_rank()
w = np.full(1000, float(r))
rt = dpmpi.Runtime(comm, {"w": w})


def step(k):
    g = np.full_like(w, k + 1.0)
    comm.Allreduce(MPI.IN_PLACE, g)
    with rt.update():
        w[:] -= 0.001 * g


rt.run(step, 200)
print(json.dumps({"event": "done", "rank": r, "digest": hashlib.sha256(w.tobytes()).hexdigest()}), flush=True)
MPI.Finalize()
print(json.dumps({"event": "finalized", "rank": r, "finalized": MPI.Is_finalized()}), flush=True)
