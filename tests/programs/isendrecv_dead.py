"""``Isendrecv`` and ``Isendrecv_replace`` whose source dies after they were posted: the wait must
raise, not wait for ever (Open MPI 5.0.11's own Isendrecv request never fails). Ranks 0 and 2
post theirs with rank 1 as source and destination, tell rank 1, which then kills itself; rank 0
waits with the request's ``Wait``, rank 2 with mpi4py's own ``MPI.Request.Waitall``. Prints one
JSON line per live rank: what the wait raised (and for mpi4py's, whether it names the peer's
failure)."""
import json
import os
import signal

import numpy as np
from mpi4py import MPI

import dpmpi

comm = dpmpi.Comm(MPI.COMM_WORLD)
r = comm.Get_rank()
if r == 1:
    for peer in (0, 2):
        comm.Recv(bytearray(1), source=peer, tag=6)
    os.kill(os.getpid(), signal.SIGKILL)
buf = np.full(1 << 16, float(r))  # (512 KiB: larger than an eager message)
if r == 0:
    req = comm.Isendrecv(buf, 1, 5, np.empty(1 << 16), 1, 5)
else:
    req = comm.Isendrecv_replace(buf, 1, 5, 1, 5)
comm.Send(bytearray(1), dest=1, tag=6)
out = {"event": "done", "rank": r}
status = MPI.Status()
try:
    if r == 0:
        req.Wait()
    else:
        MPI.Request.Waitall([req], [status])
    out["wait"] = "completed"
except Exception as exc:  # (the test judges its class)
    out["wait"] = type(exc).__name__
    if isinstance(exc, MPI.Exception):  # (ERR_IN_STATUS: the cause is in the status)
        out["proc_failed"] = MPI.ERR_PROC_FAILED in (exc.Get_error_class(), MPI.Get_error_class(status.Get_error()))
print(json.dumps(out), flush=True)
os._exit(0)  # (a dead peer: MPI_Finalize would wait for it)
