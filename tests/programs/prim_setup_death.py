"""dpmpi's primitives (no Runtime) with collectives in the setup, before the first snapshot: a
death there is repaired by dpmpi.init's watch of the setup; the replacement answers the calls
before it from the survivors' record, its restore(carry=-1, as_built=True) returns -1 (nothing
exists to restore) and it commits the first epoch with the survivors. Point "load" before each
setup collective (DPMPI_FAULTS=2:load@3:KILL). Prints a line "final" per rank: its digest, the
epoch its first restore returned (replacements), its repairs and role."""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
FAILED = (dpmpi.ProcFailedError, dpmpi.RevokedError)
comm = dpmpi.init()
r = comm.Get_rank()
dpmpi.faults.point("load")
cfg = comm.bcast({"scale": 0.5} if r == 0 else None, root=0)
x = np.random.default_rng(r).random(2048) if r else np.zeros(2048)
dpmpi.faults.point("load")
comm.Bcast(x, root=1)
dpmpi.faults.point("load")
norm = comm.allreduce(float(np.abs(x).sum()), op=MPI.MAX)
dpmpi.faults.point("load")
x *= cfg["scale"] / norm
snap = dpmpi.Snapshot(comm, {"x": x})
first = None


def restored(repair, k):
    """Respawn (unless just called in), restore; -1: commit epoch 0 with the others. Returns the epoch."""
    global first
    for _attempt in range(10):
        try:
            if repair:
                comm.Respawn()
            epoch = snap.restore(carry=k, as_built=k < 0)
        except FAILED:
            repair = True
            continue
        first = epoch if first is None else first
        if epoch >= 0:
            return epoch
        try:
            snap.stage()
            snap.commit(0)
            return 0
        except FAILED:
            repair = True
    raise RuntimeError("no recovery in 10 attempts")


k = restored(False, -1) if comm.role is dpmpi.Role.RECOVERED else -1  # (-1: epoch 0 not committed yet)
finished = False
while not finished:
    try:
        if k < 0:
            snap.stage()
            snap.commit(0)
            k = 0
        for step in range(k, steps):
            total = np.empty(1)
            comm.Allreduce(np.array([x.sum()]), total, op=MPI.SUM)
            x[:] = np.sin(x * (step + 1)) + 1e-3 * total[0]
            snap.stage()
            snap.commit(step + 1)
            k = step + 1
        comm.Barrier()
        finished = True
    except FAILED:
        k = restored(True, k)
print(json.dumps({"event": "final", "rank": r, "digest": hashlib.sha256(x.tobytes()).hexdigest()[:16],
                  "first_restore": first, "repairs": comm.repairs, "role": comm.role.value}), flush=True)
