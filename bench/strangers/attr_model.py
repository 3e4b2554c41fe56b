"""A stranger's program (written from the README only): a small model kept as a class, its
weights as attributes, its step a method (``rt.run(model.step, n)``). As a stranger first wrote
it, the update rebinds the attributes (``self.w = self.w - lr * self.m``) instead of writing the
registered arrays in place. REBIND=0: in place (``self.w -= ...``), as the README says.
Prints the ranks' digests on rank 0.
    ACTIVE=1 LO=0.5 HI=3 bench/strangers/loop.sh attr_model.py 120 10"""
import hashlib
import json
import os
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 120
rebind = os.environ.get("REBIND", "1") == "1"
comm = dpmpi.init()


class Model:
    def __init__(self, n, seed):
        rng = np.random.default_rng(seed)
        self.w = rng.standard_normal(n)
        self.m = np.zeros(n)
        self.x = rng.standard_normal((64, n))

    def step(self, k):
        g = self.x.T @ (self.x @ self.w - np.sin(k + np.arange(64))) / 64
        comm.Allreduce(MPI.IN_PLACE, g, op=MPI.SUM)
        g /= comm.Get_size()
        with rt.update():
            if rebind:
                self.m = 0.9 * self.m + g
                self.w = self.w - 0.001 * self.m
            else:
                self.m *= 0.9
                self.m += g
                self.w -= 0.001 * self.m
        for _ in range(40):  # more compute per step (a kill lands in it)
            np.tanh(self.x @ self.w)


model = Model(200_000 // 64, seed=comm.Get_rank())
rt = dpmpi.Runtime(comm, {"w": model.w, "m": model.m})
rt.run(model.step, steps)
h = hashlib.sha256(model.w.tobytes() + model.m.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if comm.Get_rank() == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
