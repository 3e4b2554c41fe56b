"""A program run under ``dpmpi-run --spares S`` that never calls ``dpmpi.init()``: every process
runs it as a rank of MPI.COMM_WORLD. Prints one JSON line per process: its rank, the size."""
import json

import dpmpi  # noqa: F401  (imported first, as the README says, but init is never called)
from mpi4py import MPI

w = MPI.COMM_WORLD
print(json.dumps({"rank": w.Get_rank(), "size": w.Get_size(), "sum": w.allreduce(1)}), flush=True)
