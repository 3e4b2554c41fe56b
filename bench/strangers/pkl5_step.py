"""A stranger's program (written from the README only): each step makes mpi4py's
``pkl5.Intracomm`` (pickled messages of any size) over ``comm.mpi`` and exchanges Python objects
with it (``allgather``, ``sendrecv``); the state saturates (tanh) after a few thousand steps and
then stays the same. ``pkl5.Intracomm(comm)`` itself is a ``TypeError`` (it takes an mpi4py
communicator), and one made once before the loop would keep the communicator a repair replaced.
Prints the ranks' digests on rank 0.
    bench/strangers/loop.sh pkl5_step.py 6000 20"""
import dpmpi, sys, hashlib, json
import numpy as np
from mpi4py.util import pkl5
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
x = np.zeros(1000)
rt = dpmpi.Runtime(comm, {"x": x})
def step(k):
    pc = pkl5.Intracomm(comm.mpi)          # made in the step: the repaired handle after a repair
    objs = pc.allgather({"r": r, "v": x[:10] + k})
    nxt = pc.sendrecv(x[:50].copy(), dest=(r + 1) % n, source=(r - 1) % n)
    with rt.update():
        x[:10] += sum(o["v"] for o in objs) * 1e-3
        x[:50] += 1e-4 * nxt
        x[...] = np.tanh(x)
rt.run(step, int(sys.argv[1]))
d = comm.gather(hashlib.sha256(x.tobytes()).hexdigest()[:16], root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
