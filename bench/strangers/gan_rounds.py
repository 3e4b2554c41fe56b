"""A stranger's program (written from the README only): two models trained in alternate rounds
of 50 steps (a GAN's pattern). Written first with one dpmpi.Runtime per model, it hung at its
first failure (twenty-fourth session; now the second round's run is refused with the fix); this
is the fix: one Runtime over both models, the round chosen inside the step. Prints the ranks'
digests on rank 0.
    bench/strangers/loop.sh gan_rounds.py 1200 20"""
import dpmpi, sys, hashlib, json
import numpy as np
from mpi4py import MPI
comm = dpmpi.init()
r = comm.Get_rank()
a, b = np.zeros(500), np.zeros(300)
rt = dpmpi.Runtime(comm, {"a": a, "b": b})


def step(k):
    if (k // 50) % 2 == 0:      # model a's round
        g = np.sin(a[:10].sum() + k + r) * np.ones(500)
        comm.Allreduce(MPI.IN_PLACE, g)
        with rt.update():
            a[...] = np.tanh(a + 1e-3 * g + 1e-4 * b.sum())
    else:                       # model b's round
        g = np.cos(b[:10].sum() + k - r) * np.ones(300)
        comm.Allreduce(MPI.IN_PLACE, g)
        with rt.update():
            b[...] = np.tanh(b + 1e-3 * g - 1e-4 * a.sum())


rt.run(step, int(sys.argv[1]))
h = hashlib.sha256(a.tobytes() + b.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
