"""Warm spares (dpmpi.init(wait=False)) and a setup before the first run: rank 0's config
broadcast (``bcast``), which the active ranks make and a waiting spare skips (it cannot make
collectives before it is called in). ``--runtime-first``: the Runtime is made before the setup
(a death there is repaired there); else after it (dpmpi.init's watch of the setup repairs it).
A death in that ``bcast`` is repaired by a warm spare, which did not run the setup and cannot
redo it with the survivors: before, they waited for it there and it for them in its restore (a
hang). Prints a line "final" per rank: its digest and recoveries."""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

comm = dpmpi.init(wait=False)
spare = comm.role is dpmpi.Role.SPARE
w = np.zeros(256)
if "--runtime-first" in sys.argv:
    rt = dpmpi.Runtime(comm, {"w": w})
if not spare:
    w[:] = comm.Get_rank() + 1.0
    cfg = comm.bcast({"lr": 0.1} if comm.Get_rank() == 0 else None, root=0)
    w *= cfg["lr"]
if "--runtime-first" not in sys.argv:
    rt = dpmpi.Runtime(comm, {"w": w})


def step(k):
    g = np.tanh(w)
    comm.Allreduce(MPI.IN_PLACE, g)
    with rt.update():
        w[...] = 0.9 * w + 1e-3 * g


rt.run(step, int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 40)
print(json.dumps({"event": "final", "rank": comm.Get_rank(), "digest": hashlib.sha256(w.tobytes()).hexdigest()[:16],
                  "recoveries": len(rt.history)}), flush=True)
