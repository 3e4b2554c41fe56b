"""A program that repairs by itself (its own except calls comm.Respawn() and starts its setup
again), no snapshots: rank 0 sends 64 MiB to rank 1 in the setup, between a bcast and an
allreduce, and rank 1 dies before its Recv (DPMPI_FAULTS=1:die@1:KILL). The failure meets rank
0 in its Send (not watched: the program repairs) and ranks 2 and 3 in the allreduce (watched by
dpmpi.init's watch of the setup). Before, ranks 2 and 3 waited in the watch's agreement for rank
0, blocked in its Send: the job hung. ``--window``: instead, a sendrecv around the ring, which
completes everywhere, then rank 2 dies before the allreduce (DPMPI_FAULTS=2:die@1:KILL): the
others meet it in the watched allreduce before any agreement could end the watch. Prints a line
"final" per rank."""
import json
import sys

import dpmpi
import numpy as np

FAILED = (dpmpi.ProcFailedError, dpmpi.RevokedError)
comm = dpmpi.init()
big = np.ones(8 << 20)


def setup():
    r = comm.Get_rank()
    cfg = comm.bcast({"a": 1} if r == 0 else None, root=0)
    if "--window" in sys.argv:
        comm.sendrecv(r, dest=(r + 1) % comm.Get_size(), source=(r - 1) % comm.Get_size())
        if r == 2:
            dpmpi.faults.point("die")
    elif r == 0:
        comm.Send(big, dest=1)
    elif r == 1:
        dpmpi.faults.point("die")
        comm.Recv(big, source=0)
    return comm.allreduce(cfg["a"])


while True:
    try:
        n = setup()
        break
    except FAILED:
        comm.Respawn()
print(json.dumps({"event": "final", "rank": comm.Get_rank(), "n": n, "repairs": comm.repairs,
                  "role": comm.role.value}), flush=True)
