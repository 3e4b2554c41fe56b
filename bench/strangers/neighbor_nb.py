"""A stranger's program: a 2-D periodic Cartesian communicator made once before the loop, and in
every step a nonblocking neighbourhood exchange (``Ineighbor_alltoall`` of each rank's four edge
values, ``Ineighbor_allgather`` of a scalar) overlapped with the interior update, then the
boundary update. Prints the digests on rank 0.
    ACTIVE=1 HI=2.5 bench/strangers/loop.sh neighbor_nb.py 2000 8"""
import hashlib, json, sys
import dpmpi, numpy as np
from mpi4py import MPI
steps = int(sys.argv[1])
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
dims = MPI.Compute_dims(n, 2)
cart = comm.Create_cart(dims, periods=[True, True])
u = np.random.default_rng(r).random((32, 32))
rt = dpmpi.Runtime(comm, {"u": u})
def step(k):
    edges = np.stack([u[0], u[-1], u[:, 0], u[:, -1]])  # (neighbour order: -dim0, +dim0, -dim1, +dim1)
    halo = np.empty_like(edges)
    mine = np.array([u.mean()])
    theirs = np.empty(4)
    q1 = cart.Ineighbor_alltoall(edges, halo)
    q2 = cart.Ineighbor_allgather(mine, theirs)
    inner = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    MPI.Request.Waitall([q1, q2])
    with rt.update():
        u[1:-1, 1:-1] = inner
        u[0] = 0.5 * (u[0] + halo[0])
        u[-1] = 0.5 * (u[-1] + halo[1])
        u[:, 0] = 0.5 * (u[:, 0] + halo[2])
        u[:, -1] = 0.5 * (u[:, -1] + halo[3])
        u[...] += 1e-3 * (theirs.mean() - u.mean())
rt.run(step, steps)
h = hashlib.sha256(u.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
