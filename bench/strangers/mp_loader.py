"""A stranger's program (written from the README only): each rank keeps a
``multiprocessing`` pool (fork) made once before the loop, as a data loader does, and in every
step its two workers build the rank's batch; the step trains a linear model on it (Allreduce of
the gradient). Prints the ranks' digests on rank 0.
    bench/strangers/loop.sh mp_loader.py 400 20"""
import dpmpi, sys, hashlib, json, multiprocessing as mp
import numpy as np
from mpi4py import MPI


def batch(args):
    k, r, part = args
    g = np.random.default_rng([k, r, part])
    x = g.standard_normal((64, 32))
    return x, x @ np.linspace(-1, 1, 32) + 0.01 * g.standard_normal(64)


comm = dpmpi.init()
r = comm.Get_rank()
pool = mp.get_context("fork").Pool(2)
w = np.zeros(32)
rt = dpmpi.Runtime(comm, {"w": w})


def step(k):
    parts = pool.map(batch, [(k, r, 0), (k, r, 1)])
    x = np.concatenate([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    g = x.T @ (x @ w - y) / len(y)
    comm.Allreduce(MPI.IN_PLACE, g)
    with rt.update():
        w[...] -= 0.05 * g / comm.Get_size()


rt.run(step, int(sys.argv[1]))
pool.close()
pool.join()
d = comm.gather(hashlib.sha256(w.tobytes()).hexdigest()[:16], root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
