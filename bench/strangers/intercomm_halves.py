"""A stranger's program (thirty-seventh session): two halves of the job, each with its own
communicator, joined by an intercommunicator made before the loop with ``Create_intercomm`` and
kept; every step mixes intra-half and inter-half collectives and a point-to-point exchange with
the partner in the other half. Written from the README's API only.

    dpmpi-run -n 5 --spares 1 -- python intercomm_halves.py STEPS
Prints one JSON line with a digest of every rank's state (and the number of recoveries)."""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
comm = dpmpi.init()
rank, size = comm.Get_rank(), comm.Get_size()
half = comm.Split(rank % 2, rank)
inter = half.Create_intercomm(0, comm, 1 - rank % 2, tag=7)  # leaders: ranks 0 and 1 of comm
partner = half.Get_rank()  # the rank of the same position in the other half

x = np.arange(64, dtype=np.float64) * (rank + 1)
acc = np.zeros(4, dtype=np.int64)
rt = dpmpi.Runtime(comm, {"x": x, "acc": acc})


def step(k):
    local = half.allreduce(int(x.sum()) % 1000003)  # within the half
    other = np.empty(1, dtype=np.int64)
    inter.Allreduce(np.array([k + rank], dtype=np.int64), other)  # the sum over the other half
    got = inter.sendrecv(rank * 1000 + k, dest=partner, source=partner)  # the partner's number
    total = comm.allreduce(local)
    with rt.update():
        x[:] = np.sin(x + k) * 3.0 + other[0] * 1e-3
        acc[:] += np.array([local, other[0], got, total], dtype=np.int64) % 1000003


rt.run(step, steps)
digest = hashlib.sha256(b"".join(comm.allgather(x.tobytes() + acc.tobytes()))).hexdigest()[:16]
if rank == 0:
    print(json.dumps({"digest": digest, "recoveries": len(rt.history)}), flush=True)
