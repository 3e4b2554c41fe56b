"""A matched receive (``comm.Mprobe`` then ``msg.Recv``) of a message whose sender died after
the probe matched it: the receive must raise dpmpi's ``ProcFailedError``, as every other
receive does (it raised mpi4py's ``MPI.Exception``, which ``dpmpi.Runtime`` does not take for a
peer's death). Rank 0 sends a message too large to go eagerly, rank 1 matches it and tells
rank 0, which then kills itself; rank 1 learns of the death from a receive from rank 0, then
receives the matched message. Arguments: ``pickled`` uses ``mprobe`` and ``msg.recv`` (a
pickled object), ``irecv`` ``msg.Irecv`` and the request's ``Wait``. Prints one JSON line per
live rank."""
import json
import os
import signal
import sys

import numpy as np
from mpi4py import MPI

import dpmpi

comm = dpmpi.Comm(MPI.COMM_WORLD)
r = comm.Get_rank()
big = 1 << 17  # doubles: 1 MiB, sent by rendezvous over shared memory
if r == 0:
    payload = {"x": np.ones(big)} if "pickled" in sys.argv else np.ones(big)
    req = comm.isend(payload, dest=1, tag=5) if "pickled" in sys.argv else comm.Isend(payload, dest=1, tag=5)
    comm.Recv(bytearray(1), source=1, tag=6)  # rank 1 has matched the message
    os.kill(os.getpid(), signal.SIGKILL)
out = {"event": "done", "rank": r}
if r == 1:
    msg = comm.mprobe(source=0, tag=5) if "pickled" in sys.argv else comm.Mprobe(source=0, tag=5)
    out["message"] = type(msg).__module__ + "." + type(msg).__name__
    comm.Send(bytearray(1), dest=0, tag=6)
    try:
        comm.Recv(bytearray(1), source=0, tag=7)  # (never sent: raises once rank 0 is dead)
    except dpmpi.ProcFailedError:
        pass
    try:
        if "pickled" in sys.argv:
            msg.recv()
        elif "irecv" in sys.argv:
            msg.Irecv(np.empty(big)).Wait()
        else:
            msg.Recv(np.empty(big))
        out["received"] = "completed"
    except Exception as exc:  # (the test judges its class)
        out["received"] = type(exc).__name__
print(json.dumps(out), flush=True)
os._exit(0)  # (a dead peer: MPI_Finalize would wait for it)
