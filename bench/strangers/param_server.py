"""A stranger's program: a parameter server on rank 0. In every step each worker sends its
gradient with ``Isend``; rank 0 posts one ``Irecv`` per worker and takes them as they come with
mpi4py's ``MPI.Request.Waitany`` (and ``Testany`` polling while it computes its own), sums them in
rank order, and sends the new parameters back with one ``Isend`` per worker (``Waitall``).
Prints the digests on rank 0.
    ACTIVE=1 HI=2.5 bench/strangers/loop.sh param_server.py 5000 8"""
import hashlib, json, sys
import dpmpi, numpy as np
from mpi4py import MPI
steps = int(sys.argv[1])
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
w = np.random.default_rng(0).random(2048)
rt = dpmpi.Runtime(comm, {"w": w})
def grad(k, who):
    return np.cos(w * (who + 1) + 1e-3 * k)
def step(k):
    if r == 0:
        got = [np.empty_like(w) for _ in range(1, n)]
        reqs = [comm.Irecv(got[i - 1], i, k % 1000) for i in range(1, n)]
        mine = grad(k, 0)
        seen = set()
        while len(seen) < len(reqs):
            idx, flag = MPI.Request.Testany(reqs)
            if flag and idx != MPI.UNDEFINED:
                seen.add(idx)
            elif not flag:
                idx = MPI.Request.Waitany(reqs)
                if idx != MPI.UNDEFINED:
                    seen.add(idx)
        total = mine + sum(got)  # (rank order: deterministic)
        with rt.update():
            w[:] = w - 1e-3 * total / n
        MPI.Request.Waitall([comm.Isend(w, i, 2000 + k % 1000) for i in range(1, n)])
    else:
        req = comm.Isend(grad(k, r), 0, k % 1000)
        new = np.empty_like(w)
        comm.Recv(new, 0, 2000 + k % 1000)
        req.Wait()
        with rt.update():
            w[:] = new
rt.run(step, steps)
h = hashlib.sha256(w.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
