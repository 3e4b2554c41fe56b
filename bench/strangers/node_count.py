"""A stranger's program (written from the README only): the setup asks how many ranks share its
node and which one it is there (a node-local Split_type, freed right after, as codes that pick a
device or a thread count by local rank do), splits the ranks into pairs, then a dpmpi.Runtime
loop whose steps Allreduce over the pair. Before the thirty-eighth session a failure anywhere
hung the job: the replacement made the freed communicator again while the survivors recovered.
Prints the ranks' digests on rank 0.
    ACTIVE=1 LO=1 HI=4 bench/strangers/loop.sh node_count.py 400 10"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 400
comm = dpmpi.init()
r = comm.Get_rank()
node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=r)
local_rank, local_size = node.Get_rank(), node.Get_size()
node.Free()
pair = comm.Split(r // 2, r)
w = np.zeros(20000)
rt = dpmpi.Runtime(comm, {"w": w}, snapshot_every=4)


def step(k):
    g = np.sin(w[::-1] + 0.01 * (k + r + local_rank))
    pair.Allreduce(MPI.IN_PLACE, g)
    with rt.update():
        w[...] = 0.99 * w + 0.01 * g / local_size


rt.run(step, steps)
h = hashlib.sha256(w.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": hashlib.sha256("".join(d).encode()).hexdigest()[:16],
                      "recoveries": len(rt.history)}), flush=True)
