"""Two models, each with its own dpmpi.Runtime, trained in alternate rounds (a GAN's pattern):
a recovery would restore the arrays of the Runtime whose run is in progress only (before the
twenty-fourth session the job hung at its first failure). The second round's first run raises
RuntimeError on every rank, before any MPI call. One JSON line per rank: {"event": "refused",
"rank", "round", "error"}."""
import json

import numpy as np

import dpmpi
from mpi4py import MPI

comm = dpmpi.init()
r = comm.Get_rank()
a, b = np.zeros(8), np.zeros(8)
rta, rtb = dpmpi.Runtime(comm, {"a": a}), dpmpi.Runtime(comm, {"b": b})


def step_a(k):
    g = np.full(8, float(r + k))
    comm.Allreduce(MPI.IN_PLACE, g)
    with rta.update():
        a[...] += g


def step_b(k):
    g = np.full(8, float(r - k))
    comm.Allreduce(MPI.IN_PLACE, g)
    with rtb.update():
        b[...] += g


for rnd in range(1, 4):
    try:
        rta.run(step_a, 5 * rnd)
        rtb.run(step_b, 5 * rnd)
    except RuntimeError as exc:
        print(json.dumps({"event": "refused", "rank": r, "round": rnd, "error": str(exc)}), flush=True)
        raise
