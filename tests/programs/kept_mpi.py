"""mpi4py communicator objects kept from before the loop. ``--kept raw``: ``comm.mpi`` and a
derived communicator's ``.mpi``, kept in variables (as a program does to hand them to an mpi4py
library); before the twenty-fourth session a repair left them on the replaced communicators, and
the step failed on them after every repair, forever (50 000 repairs in 25 s, no error). Now the
repair puts the rebuilt handle into those objects. ``--kept pkl5``: an ``mpi4py.util.pkl5``
communicator made once over ``comm.mpi`` (a copy of its handle, which dpmpi cannot rebuild):
the Runtime stops the loop of repairs with an error that says so. Exact integer arithmetic;
each rank prints its state (failure-free: x == [S n (n - 1) / 2 + n S (S - 1) / 2, S (S - 1)]
for S steps on n ranks)."""
import argparse
import json

import numpy as np

import dpmpi
from mpi4py import MPI
from mpi4py.util import pkl5

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=40)
p.add_argument("--kept", choices=["raw", "pkl5"], default="raw")
a = p.parse_args()

comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
raw = comm.mpi if a.kept == "raw" else pkl5.Intracomm(comm.mpi)
halves = comm.Split(r % 2, r)  # (dpmpi's handle kept: docs/communicators.md)
half = halves.mpi  # (a derived communicator's mpi4py object, kept too)
x = np.zeros(2, dtype=np.int64)
rt = dpmpi.Runtime(comm, {"x": x})


def step(k):
    g = np.array([r + k], dtype=np.int64)
    if a.kept == "raw":
        raw.Allreduce(MPI.IN_PLACE, g)
    else:
        g[0] = sum(raw.allgather(r + k))
    h = np.array([k], dtype=np.int64)
    half.Allreduce(MPI.IN_PLACE, h)
    with rt.update():
        x[0] += g[0]
        x[1] += h[0]


try:
    rt.run(step, a.steps)
except RuntimeError as exc:
    print(json.dumps({"event": "stopped", "rank": r, "error": str(exc)}), flush=True)
    raise
print(json.dumps({"event": "done", "rank": r, "x": x.tolist(), "recoveries": len(rt.history),
                  "role": comm.role.value}), flush=True)
