"""A stranger's program: node-shared memory (``Split_type(COMM_TYPE_SHARED)`` made once before
the loop; in every step a ``Win.Allocate_shared`` over ``node.mpi`` where each rank writes its part,
a ``Barrier``, then each rank reads its neighbour's part straight from shared memory through
``Shared_query``; the window freed in the step, as limitations.md advises). Prints the digests on
rank 0.
    ACTIVE=1 HI=2.5 bench/strangers/loop.sh shared_win.py 2000 8"""
import hashlib, json, sys
import dpmpi, numpy as np
from mpi4py import MPI
steps = int(sys.argv[1])
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
node = comm.Split_type(MPI.COMM_TYPE_SHARED)
nr, nn = node.Get_rank(), node.Get_size()
x = np.random.default_rng(r).random(512)
rt = dpmpi.Runtime(comm, {"x": x})
def step(k):
    win = MPI.Win.Allocate_shared(x.nbytes, 8, comm=node.mpi)
    try:
        mine = np.frombuffer(win.tomemory(), dtype=np.float64)
        mine[:] = x * (k % 7 + 1)
        node.Barrier()
        buf, _ = win.Shared_query((nr + 1) % nn)
        theirs = np.frombuffer(buf, dtype=np.float64).copy()
        node.Barrier()
    finally:
        win.Free()
    s = comm.allreduce(float(theirs.sum()))
    with rt.update():
        x[:] = np.cos(x + 1e-4 * s + 1e-3 * theirs) * 0.5 + 0.5
rt.run(step, steps)
h = hashlib.sha256(x.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
