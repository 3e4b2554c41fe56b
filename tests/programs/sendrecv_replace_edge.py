"""``Sendrecv_replace`` at the end of an open chain (``source`` ``MPI_PROC_NULL``) whose send fails
with ``ERR_REVOKED``: Open MPI 5.0.11's then cancels an uninitialised request and segfaults (its
``MPI_Sendrecv``); dpmpi's must raise ``RevokedError``. Rank 1 revokes the communicator; both
ranks then send 800 KB (not eager: rank 1's send fails at once on the communicator it revoked;
rank 0's waits for its receiver, which never receives, until the revoke reaches it). Prints one
JSON line per rank: what the call raised."""
import json
import os

import numpy as np
from mpi4py import MPI

import dpmpi

comm = dpmpi.Comm(MPI.COMM_WORLD)
r = comm.Get_rank()
if r == 1:
    comm.Revoke()
buf = np.ones(100000)
try:
    comm.Sendrecv_replace(buf, dest=1 - r, sendtag=1, source=MPI.PROC_NULL, recvtag=1)
    out = "completed"
except Exception as exc:  # (the test judges its class)
    out = type(exc).__name__
print(json.dumps({"event": "done", "rank": r, "raised": out}), flush=True)
os._exit(0)  # (a revoked world: MPI_Finalize's exit agreement is not this test's subject)
