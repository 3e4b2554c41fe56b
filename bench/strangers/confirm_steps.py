"""A stranger's program (written from the README and docs/runtime.md only): every step is
confirmed with an agreement (``Runtime(confirm_steps=True)``, on by default only across nodes),
after an ``Allreduce`` of the gradients and a pickled ``allreduce`` of a loss. A rank killed
mid-step leaves some survivors in the agreement while others already repair: their ``Agree``
must give up (``RevokedError``) and join the repair. Prints the ranks' digests on rank 0.
    bench/strangers/loop.sh confirm_steps.py 300 20"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
comm = dpmpi.init()
r = comm.Get_rank()
w = np.random.default_rng(5).standard_normal((256, 256))   # the same start on every rank
x = np.random.default_rng(100 + r).standard_normal((64, 256))
rt = dpmpi.Runtime(comm, {"w": w}, confirm_steps=True)


def step(k):
    g = x.T @ np.tanh(x @ w) / len(x)                       # a rank's gradient
    comm.Allreduce(MPI.IN_PLACE, g, op=MPI.SUM)
    loss = comm.allreduce(float(np.square(x @ w).mean()), op=MPI.SUM)
    with rt.update():
        w[...] -= 1e-3 * g / comm.Get_size() + 1e-6 * loss * w


rt.run(step, steps)
d = comm.gather(hashlib.sha256(w.tobytes()).hexdigest()[:16], root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history), "confirmed": rt.confirmed}), flush=True)
