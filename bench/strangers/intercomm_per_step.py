"""A stranger's program (thirty-seventh session): as intercomm_halves.py, but the
intercommunicator and its Merge are made in every step and freed at its end (the one-time
warning before the thirty-seventh session advised making it inside the step). Written from the
README's API only.

    dpmpi-run -n 5 --spares 1 -- python intercomm_per_step.py STEPS
Prints one JSON line with a digest of every rank's state (and the number of recoveries)."""
import hashlib
import json
import os
import sys

import dpmpi
import numpy as np

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
comm = dpmpi.init()
rank = comm.Get_rank()
half = comm.Split(rank % 2, rank)
x = np.arange(16, dtype=np.float64) * (rank + 1)
rt = dpmpi.Runtime(comm, {"x": x}, replicas=int(os.environ.get("R", "1")))  # (R=2: two replicas)


def step(k):
    inter = half.Create_intercomm(0, comm, 1 - rank % 2, tag=5)
    merged = inter.Merge(high=bool(rank % 2))
    s = inter.allreduce(k + rank) + merged.allreduce(merged.Get_rank())
    merged.Free()
    inter.Free()
    with rt.update():
        x[:] = np.sin(x + s)


rt.run(step, steps)
digest = hashlib.sha256(b"".join(comm.allgather(x.tobytes()))).hexdigest()[:16]
if rank == 0:
    print(json.dumps({"digest": digest, "recoveries": len(rt.history)}), flush=True)
