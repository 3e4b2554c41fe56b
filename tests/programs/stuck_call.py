"""A survivor stuck in a call that a peer's death does not reach: at step 5, world rank 1 waits in a
Recv from rank 0 on a private Dup of comm.mpi that nobody sends on and nobody revokes, and world
rank 3 is killed (DPMPI_FAULTS 3:stuck@1:KILL); their replacements (other world ranks) redo the
step without either. argv[1] == "ref": no wait (the failure-free reference). Ranks 0 and 2 notice
the death at their Allreduce and wait for rank 1 in the repair's Shrink. Rank 1 and 3's snapshot
copies are held by ranks 0 and 2. Rank 0 prints the ranks' digests."""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from dpmpi import faults
from mpi4py import MPI

comm = dpmpi.init()
r = comm.Get_rank()
world = MPI.COMM_WORLD.Get_rank()
x = np.full(16, float(r + 1))
rt = dpmpi.Runtime(comm, {"x": x})


def step(k):
    if k == 5:
        private = comm.mpi.Dup()
        if world == 3:
            faults.point("stuck")
        if world == 1 and sys.argv[1] != "ref":
            private.Recv(np.empty(1), source=0, tag=5)  # (never sent: stuck until the process ends)
    s = np.array([x.sum()])
    comm.Allreduce(MPI.IN_PLACE, s, MPI.SUM)
    with rt.update():
        x[:] = np.sin(x + 1e-3 * s[0] + k)


rt.run(step, 12)
d = comm.gather(hashlib.sha256(x.tobytes()).hexdigest()[:16], root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
