"""A stranger's program (written from the README only): training that stops early from inside
the step. Each step allreduces its loss; once the mean is under a tolerance, the step raises the
program's own ``Converged`` exception (every rank at the same step: the loss is a collective's
result), caught around ``rt.run``. EXIT=1: the step calls ``sys.exit(0)`` instead, on every rank.
Prints the ranks' digests and the step it stopped at on rank 0.
    ACTIVE=1 LO=1 HI=5 bench/strangers/loop.sh early_stop.py 100000 12"""
import hashlib
import json
import os
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

limit = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
use_exit = os.environ.get("EXIT") == "1"
comm = dpmpi.init()
r = comm.Get_rank()
rng = np.random.default_rng(r)
x = rng.standard_normal((256, 512))
y = x @ np.linspace(-1, 1, 512) + 0.01 * rng.standard_normal(256)
w = np.zeros(512)
rt = dpmpi.Runtime(comm, {"w": w})
stopped = {}


class Converged(Exception):
    pass


def report(step):
    h = hashlib.sha256(w.tobytes()).hexdigest()[:16]
    d = comm.gather(h, root=0)
    if r == 0:
        print(json.dumps({"digest": d, "recoveries": len(rt.history), "stopped": step}), flush=True)


def step(k):
    err = x @ w - y
    g = x.T @ err / len(y)
    loss = np.array([float(err @ err) / len(y)])
    comm.Allreduce(MPI.IN_PLACE, g)
    comm.Allreduce(MPI.IN_PLACE, loss)
    for _ in range(20):  # more compute per step
        np.tanh(x @ w)
    if loss[0] / comm.Get_size() < 0.05:
        if use_exit:
            report(k)
            sys.exit(0)
        stopped["at"] = k
        raise Converged()
    with rt.update():
        w[...] = w - 0.002 * g / comm.Get_size()


try:
    rt.run(step, limit)
except Converged:
    pass
report(stopped.get("at", -1))
