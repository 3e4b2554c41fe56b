"""A stranger's program: process groups made lazily, on a layer's first use, and cached (as
model-parallel codes make their groups), a new layer joining every 25 steps (up to 40), beside a split made
and freed in every step; steps of a few ms, so a kill from outside often lands while a group is
being made. Prints the digest of every rank's state. (A first version also freed and remade
every group every 300 steps; a kill in such a step can hang it: the replacement is handed the
group the survivors made before the failure and free on their redo, the ambiguity that
docs/spares.md describes.)"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
comm = dpmpi.init()
r = comm.Get_rank()
x = np.random.default_rng(11 + r).random(1 << 12)
rt = dpmpi.Runtime(comm, {"x": x})
groups = {}  # layer -> its communicator, made on first use


def group(layer):
    if layer not in groups:
        groups[layer] = comm.Dup() if layer % 3 == 0 else comm.Split((comm.Get_rank() + layer) % 2, comm.Get_rank())
    return groups[layer]


def step(k):
    tmp = comm.Split(comm.Get_rank() // 2, comm.Get_rank())
    part = np.zeros(1)
    tmp.Allreduce(np.array([x[:64].sum()]), part, op=MPI.SUM)
    tmp.Free()
    out = np.zeros(1)
    for layer in range(min(k // 25, 39) + 1):
        group(layer).Allreduce(np.array([x[layer]]), out, op=MPI.SUM)
    with rt.update():
        x[:] = 3.9 * x * (1 - x)
        x[1] = (out[0] + part[0]) % 1.0


rt.run(step, steps)
h = hashlib.sha256(x.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
