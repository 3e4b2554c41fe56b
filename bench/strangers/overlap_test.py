"""A stranger's program (written from the README only): each step starts a non-blocking
``Iallreduce`` of the previous gradient and polls it with ``req.Test()`` between chunks of
compute (communication overlapped with computation, as a bucketed data-parallel trainer does),
then waits on it and updates. Prints the ranks' digests on rank 0.
    bench/strangers/loop.sh overlap_test.py 1500 20"""
import dpmpi, sys, hashlib, json
import numpy as np
from mpi4py import MPI
comm = dpmpi.init()
r = comm.Get_rank()
w = np.zeros(4096)
g_prev = np.zeros(4096)
rt = dpmpi.Runtime(comm, {"w": w, "g_prev": g_prev})


def step(k):
    out = np.empty_like(g_prev)
    req = comm.Iallreduce(g_prev, out)
    g = np.zeros_like(w)
    polls = 0
    for c in range(8):                  # compute in chunks, polling the reduction between them
        g[c * 512:(c + 1) * 512] = np.sin(w[c * 512:(c + 1) * 512] + 0.001 * (k + r + c))
        if not req.Test():
            polls += 1
    req.Wait()
    with rt.update():
        w[...] -= 1e-3 * out / comm.Get_size()
        g_prev[...] = g


rt.run(step, int(sys.argv[1]))
d = comm.gather(hashlib.sha256(w.tobytes() + g_prev.tobytes()).hexdigest()[:16], root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
