"""A stranger's program: a 1-D open chain (no wrap-around) whose ranks swap 64 KiB halos with
their neighbours by ``Sendrecv_replace`` in every step, the ends with ``MPI.PROC_NULL``, as in a
stencil's halo exchange. ``RAW=1`` makes the same calls on ``comm.mpi`` (Open MPI's own
``Sendrecv_replace``). Prints the digests on rank 0.
    ACTIVE=1 HI=2.5 bench/strangers/loop.sh chain_replace.py 2000 8"""
import hashlib, json, os, sys
import dpmpi, numpy as np
from mpi4py import MPI
steps = int(sys.argv[1])
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
up = r - 1 if r > 0 else MPI.PROC_NULL
down = r + 1 if r < n - 1 else MPI.PROC_NULL
c = comm.mpi if os.environ.get("RAW") else comm
u = np.random.default_rng(r).random((3, 8192))
rt = dpmpi.Runtime(comm, {"u": u})
def step(k):
    top, bottom = u[0].copy(), u[-1].copy()
    c.Sendrecv_replace(top, dest=up, sendtag=1, source=down, recvtag=1)      # my top goes up, the one below's top comes
    c.Sendrecv_replace(bottom, dest=down, sendtag=2, source=up, recvtag=2)   # my bottom goes down
    with rt.update():
        if down != MPI.PROC_NULL:
            u[-1] = 0.5 * (u[-1] + top)
        if up != MPI.PROC_NULL:
            u[0] = 0.5 * (u[0] + bottom)
        u[1] = np.sin(u[1] + 1e-3 * k)
rt.run(step, steps)
h = hashlib.sha256(u.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
