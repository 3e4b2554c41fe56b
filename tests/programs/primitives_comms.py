"""A program on dpmpi's primitives (Snapshot, Respawn, restore; no Runtime) with two communicators
made before its first snapshot and kept, a row and a column, used in every step, and before them
a node-local Split_type used for its size and freed. A replacement's setup gets all three from
the repair, in order (a hang with a first version of the thirty-eighth session's pins, and, until
the thirty-ninth session, at the freed one, e.g. under DPMPI_FAULTS=1:Allreduce@100:KILL). Prints
the ranks' digests on rank 0.
    primitives_comms.py STEPS"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1])
comm = dpmpi.init()
r = comm.Get_rank()
node = comm.Split_type(MPI.COMM_TYPE_SHARED)
on_node = node.Get_size()
node.Free()
row = comm.Split(r // 2, r)
col = comm.Split(r % 2, r)
x = np.full(4096, float(r + on_node))
snap = dpmpi.Snapshot(comm, {"x": x}, replicas=1)


def restored(repair: bool) -> int:
    while True:
        try:
            if repair:
                comm.Respawn()
            return snap.restore()
        except (dpmpi.ProcFailedError, dpmpi.RevokedError):
            repair = True


if comm.role is dpmpi.Role.RECOVERED:
    k = restored(False)
else:
    snap.stage()
    snap.commit(0)
    k = 0
while k < steps:
    try:
        total = np.empty(1)
        comm.Allreduce(np.array([x.sum()]), total, op=MPI.SUM)
        grid = row.allreduce(r) + 10 * col.allreduce(r)
        x[:] = np.sin(x + 1e-6 * total[0]) + 1e-3 * grid
        snap.stage()
        snap.commit(k + 1)
        k += 1
    except (dpmpi.ProcFailedError, dpmpi.RevokedError):
        k = restored(True)
d = comm.gather(hashlib.sha256(x.tobytes()).hexdigest()[:16], root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": comm.repairs}), flush=True)
snap.close()
