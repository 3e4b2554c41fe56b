"""A stranger's program (written from the README only): a small "library" object made once
before the loop keeps ``comm.mpi`` (the mpi4py communicator, as mpi4py libraries take it) and a
communicator split by parity, and does the step's halo exchange (``Sendrecv``) and norms
(``Allreduce``) on them. Before the twenty-fourth session, a repair left those objects on the
replaced communicators: every step failed on them again and the job repaired nothing until its
time limit (50 000 repairs in 25 s, no error). Prints the ranks' digests on rank 0.
    bench/strangers/loop.sh library_comm.py 3000 20"""
import dpmpi, sys, hashlib, json
import numpy as np
from mpi4py import MPI


class Halo:
    """What a library would do with the communicators it is given."""

    def __init__(self, mpicomm, sub):
        self.comm, self.sub = mpicomm, sub
        self.r, self.n = mpicomm.Get_rank(), mpicomm.Get_size()

    def exchange(self, u):
        left, right = np.empty(1), np.empty(1)
        self.comm.Sendrecv(u[-1:].copy(), (self.r + 1) % self.n, 7, left, (self.r - 1) % self.n, 7)
        self.comm.Sendrecv(u[:1].copy(), (self.r - 1) % self.n, 8, right, (self.r + 1) % self.n, 8)
        return left[0], right[0]

    def norms(self, u):
        s = np.array([np.dot(u, u)])
        self.comm.Allreduce(MPI.IN_PLACE, s)
        h = np.array([u.sum()])
        self.sub.Allreduce(MPI.IN_PLACE, h)
        return s[0], h[0]


comm = dpmpi.init()
r = comm.Get_rank()
parity = comm.Split(r % 2, r)          # dpmpi's handle kept; the library gets its .mpi
lib = Halo(comm.mpi, parity.mpi)
u = np.cos(np.arange(2000) * 0.01 + r)
rt = dpmpi.Runtime(comm, {"u": u})


def step(k):
    left, right = lib.exchange(u)
    total, half = lib.norms(u)
    with rt.update():
        lap = np.empty_like(u)
        lap[1:-1] = u[:-2] - 2 * u[1:-1] + u[2:]
        lap[0], lap[-1] = left - 2 * u[0] + u[1], u[-2] - 2 * u[-1] + right
        u[...] = u + 0.1 * lap - 1e-6 * (total + half) * u


rt.run(step, int(sys.argv[1]))
d = comm.gather(hashlib.sha256(u.tobytes()).hexdigest()[:16], root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
