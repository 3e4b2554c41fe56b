"""A revoke while large messages are in flight (plain mpi4py, no process dies).

Ranks 0 and 1 exchange 16 MiB with Isend/Irecv + Waitall every iteration; rank 2 revokes the
communicator at iteration AT. Open MPI 5.0.11 then aborted healthy ranks ("Send error after
request freed ... MPI_ERRORS_ARE_FATAL": the revoke ended the requests, Waitall freed them, and
ob1 later finished the send). Under dpmpi-run every rank must shrink and end normally.

    dpmpi-run -n 3 -- python revoke_inflight.py AT
"""
import json
import sys

from mpi4py import MPI
import numpy as np

comm = MPI.COMM_WORLD.Dup()
rank = comm.Get_rank()
comm.Barrier()
a, b = np.ones(1 << 21), np.empty(1 << 21)
at = int(sys.argv[1])
error = None
for i in range(200):
    try:
        if rank == 2:
            if i == at:
                comm.Revoke()
        elif rank < 2:
            peer = 1 - rank
            MPI.Request.Waitall([comm.Irecv(b, source=peer, tag=i), comm.Isend(a, dest=peer, tag=i)])
        comm.Barrier()
    except MPI.Exception as exc:
        error = exc.Get_error_class()
        break
smaller = comm.Shrink()
smaller.Barrier()
print(json.dumps({"event": "done", "rank": rank, "size": smaller.Get_size(), "iteration": i,
                  "error_class": error}), flush=True)
