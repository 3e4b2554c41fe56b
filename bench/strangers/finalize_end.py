"""A stranger's program (written from the README only) that ends, as many mpi4py programs do,
with its own MPI.Finalize() (before the fourteenth session such a job failed even without a
failure: the fence of mpi4py's Finalize waited for the idle spare): a 2-D diffusion on a strip
of rows per rank, halo rows exchanged with Sendrecv, the global heat from a pickled allreduce.
Prints the ranks' digests on rank 0.
    bench/strangers/loop.sh finalize_end.py 1500 12"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
comm = dpmpi.init()
rank, size = comm.Get_rank(), comm.Get_size()
grid = np.zeros((66, 128))
grid[1:-1, :] = np.add.outer(np.arange(64) + 64 * rank, np.arange(128)) % 17
heat = np.zeros(1)
rt = dpmpi.Runtime(comm, {"grid": grid, "heat": heat})
up, down = (rank - 1) % size, (rank + 1) % size


def step(k):
    comm.Sendrecv(grid[1].copy(), dest=up, recvbuf=grid[-1], source=down)
    comm.Sendrecv(grid[-2].copy(), dest=down, recvbuf=grid[0], source=up)
    new = grid[1:-1] + 0.2 * (grid[:-2] + grid[2:] + np.roll(grid[1:-1], 1, 1) + np.roll(grid[1:-1], -1, 1)
                              - 4 * grid[1:-1])
    total = comm.allreduce(float(new.sum()))
    with rt.update():
        grid[1:-1] = new
        heat[0] = total


rt.run(step, steps)
d = comm.gather(hashlib.sha256(grid.tobytes() + heat.tobytes()).hexdigest()[:16], root=0)
if rank == 0:
    sys.stdout.write(json.dumps({"digest": d, "recoveries": len(rt.history)}) + "\n")
MPI.Finalize()
