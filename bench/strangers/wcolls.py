"""A stranger's program: the "w" and "v" collectives with counts that change every step:
``Alltoallw`` with a strided (vector) datatype per peer, ``Reduce_scatter`` with per-rank counts
that rotate with the step, and a nonblocking ``Ialltoallw`` overlapped with a local update.
Prints the digests on rank 0.
    ACTIVE=1 HI=2.5 bench/strangers/loop.sh wcolls.py 5000 8"""
import hashlib, json, sys
import dpmpi, numpy as np
from mpi4py import MPI
steps = int(sys.argv[1])
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
x = np.random.default_rng(r).random(8 * n)
rt = dpmpi.Runtime(comm, {"x": x})
every_other = MPI.DOUBLE.Create_vector(4, 1, 2).Commit()  # 4 doubles out of 8
def step(k):
    out = np.ascontiguousarray(x.reshape(n, 8))
    got = np.zeros((n, 4))
    sendspec = [out, ([1] * n, [i * 64 for i in range(n)]), [every_other] * n]
    recvspec = [got, ([4] * n, [i * 32 for i in range(n)]), [MPI.DOUBLE] * n]
    comm.Alltoallw(sendspec, recvspec)
    counts = [(k + i) % 3 + 1 for i in range(n)]
    part = np.empty(counts[r])
    comm.Reduce_scatter(x[:sum(counts)].copy(), part, counts, MPI.SUM)
    got2 = np.zeros((n, 4))
    req = comm.Ialltoallw([out, ([1] * n, [i * 64 for i in range(n)]), [every_other] * n],
                          [got2, ([4] * n, [i * 32 for i in range(n)]), [MPI.DOUBLE] * n])
    local = np.tanh(x)
    req.Wait()
    with rt.update():
        x[:] = 0.5 * local + 0.25 * np.resize(got.ravel() + got2.ravel(), x.size) + 1e-3 * part.sum()
rt.run(step, steps)
every_other.Free()
h = hashlib.sha256(x.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
