"""A stranger's program: one-sided communication made in the step, as limitations.md advises: a
window over ``comm.mpi`` made in each step (``Win.Create`` on a numpy buffer; ``ALLOC=1``:
``Win.Allocate``), a ring of ``Put``s between two ``Fence``s, freed in the step. Prints the
digests on rank 0.
    bench/strangers/loop.sh win_step.py 800 10"""
import hashlib, json, os, sys
import dpmpi
import numpy as np
from mpi4py import MPI
steps = int(sys.argv[1])
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
x = np.zeros(8)
rt = dpmpi.Runtime(comm, {"x": x})
def step(k):
    if os.environ.get("ALLOC"):
        win = MPI.Win.Allocate(16, 8, comm=comm.mpi)
        buf = np.frombuffer(win.tomemory(), dtype=np.float64)
        buf[:] = 0.0
    else:
        buf = np.zeros(2)
        win = MPI.Win.Create(buf, comm=comm.mpi)
    try:
        win.Fence()
        win.Put(np.array([x[0] + r, float(k)]), (r + 1) % n)
        win.Fence()
        got = float(buf.sum())
    finally:
        win.Free()
    with rt.update():
        x[...] = np.tanh(x + 1e-3 * (got + comm.allreduce(float(x[1]))) + 1e-4 * np.arange(8))
rt.run(step, steps)
h = hashlib.sha256(x.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
