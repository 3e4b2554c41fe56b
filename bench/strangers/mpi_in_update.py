"""A stranger's program: the whole step inside ``with rt.update():``, MPI calls included (an
Allreduce between two in-place writes of the state, then a ring Sendrecv into a state array), so a
peer's death meets survivors half-way through modifying their state."""
import sys, hashlib, json, time
import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
x = np.arange(4096, dtype=np.float64) + r
halo = np.zeros(4096)
rt = dpmpi.Runtime(comm, {"x": x, "halo": halo})

def step(k):
    with rt.update():
        x[...] *= 0.5                                  # first write
        s = x.copy()
        comm.Allreduce(MPI.IN_PLACE, s)             # a death here: x is half-updated
        x[...] += s / n
        comm.Sendrecv(x, dest=(r + 1) % n, recvbuf=halo, source=(r - 1) % n)
        x[...] += 0.01 * halo
        time.sleep(0.004)

rt.run(step, steps)
h = hashlib.sha256(x.tobytes() + halo.tobytes())
d = comm.gather(h.hexdigest()[:16], root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
