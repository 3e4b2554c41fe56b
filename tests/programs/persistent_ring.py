"""Persistent requests made once, before a dpmpi.Runtime loop (a stranger's halo exchange died on
the first recovery: its requests belonged to the revoked communicator): a ring of Send_init /
Recv_init on the active communicator, started by mpi4py's own Startall, and a pair on a
communicator split once from it, started by dpmpi's. Prints each rank's final state."""
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1])
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
half = comm.Split(r % 2, r)
hr, hn = half.Get_rank(), half.Get_size()
x = np.zeros(2, dtype=np.int64)
rt = dpmpi.Runtime(comm, {"x": x})
out, inc, hout, hinc = (np.zeros(1, dtype=np.int64) for _ in range(4))
ring = [comm.Send_init(out, dest=(r + 1) % n, tag=5), comm.Recv_init(inc, source=(r - 1) % n, tag=5)]
pair = [half.Send_init(hout, dest=(hr + 1) % hn, tag=6), half.Recv_init(hinc, source=(hr - 1) % hn, tag=6)]


def step(k):
    out[0], hout[0] = x[0] + k + r, x[1] + k * r
    MPI.Prequest.Startall(ring)
    dpmpi.Prequest.Startall(pair)
    MPI.Request.Waitall(ring)
    dpmpi.Request.Waitall(pair)
    with rt.update():
        x[0] = (x[0] + inc[0]) % 1000003
        x[1] = (x[1] + hinc[0]) % 1000003


rt.run(step, steps)
print(json.dumps({"event": "done", "rank": r, "x": x.tolist(), "recoveries": len(rt.history),
                  "role": comm.role.value}), flush=True)
