"""A stranger's program (written from the README only): 3 rows of a field split among 4 ranks with
``np.array_split``, so that rank 3 holds none (its state is an empty (0, 64) array); each step
mixes every row with the global mean (``comm.Allreduce`` of the sums and the row count) and adds a
rank-dependent wave. Before the fifty-second session the rank with no rows warned that its state
never changed, on a failure-free run. Prints the digest on rank 0.
    ACTIVE=1 bench/strangers/loop.sh empty_rank.py 2000 8"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
comm = dpmpi.init()
rank, size = comm.Get_rank(), comm.Get_size()
mine = np.array_split(np.arange(3), size)[rank]
field = np.zeros((len(mine), 64))
field[:] = mine[:, None] + np.linspace(0.0, 1.0, 64)[None, :]
rt = dpmpi.Runtime(comm, {"field": field})


def step(k):
    sums = np.zeros(65)
    sums[:64] = field.sum(axis=0)
    sums[64] = len(mine)
    comm.Allreduce(MPI.IN_PLACE, sums)
    mean = sums[:64] / sums[64]
    with rt.update():
        field[:] = 0.5 * field + 0.5 * mean + 0.01 * np.sin(k + mine[:, None] + np.arange(64)[None, :])


rt.run(step, steps)
rows = comm.gather(field.tobytes(), root=0)
if rank == 0:
    print(json.dumps({"digest": hashlib.sha256(b"".join(rows)).hexdigest()[:16],
                      "recoveries": len(rt.history)}), flush=True)
