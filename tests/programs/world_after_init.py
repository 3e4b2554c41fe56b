"""``MPI.COMM_WORLD`` after ``dpmpi.init()`` in a job with spares (``dpmpi.world_guard``): each
rank, an initial one or a replacement, tries calls that communicate on the world (they would
wait for ever for the spares) and local ones, then runs STEPS steps of a ``Runtime`` loop.
Prints one JSON line per rank: which calls raised the guard's error, the local calls' results,
its world rank and role, the state's sum and its recoveries."""
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1])
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
CALLS = {
    "Barrier": lambda: MPI.COMM_WORLD.Barrier(),
    "allreduce": lambda: MPI.COMM_WORLD.allreduce(1),
    "Split": lambda: MPI.COMM_WORLD.Split(0, r),
    "send": lambda: MPI.COMM_WORLD.send(1, dest=n),
    "Iprobe": lambda: MPI.COMM_WORLD.Iprobe(),
    "dpmpi.COMM_WORLD.Barrier": lambda: dpmpi.COMM_WORLD.Barrier(),
    "dpmpi.COMM_WORLD.bcast": lambda: dpmpi.COMM_WORLD.bcast(1),
}


def refused():
    out = {}
    for name, call in CALLS.items():
        try:
            call()
            out[name] = "returned"
        except RuntimeError as exc:
            out[name] = "would wait for ever" in str(exc) and "dpmpi.init() returned" in str(exc)
    return out


world = MPI.COMM_WORLD
local = [world.Get_size(), world.Get_group().Get_size(), world.Get_attr(MPI.TAG_UB) > 0,
         isinstance(world, MPI.Intracomm), world == MPI.Intracomm(world), world.Get_name()]
x = np.zeros(4)
rt = dpmpi.Runtime(comm, {"x": x})


def step(k):
    s = comm.allreduce(k * (r + 1))
    with rt.update():
        x[:] = 0.5 * x + s + np.arange(4)


rt.run(step, steps)
print(json.dumps({"rank": r, "role": comm.role.name, "world_rank": world.Get_rank(), "refused": refused(),
                  "local": local, "x": float(x.sum()), "recoveries": len(rt.history)}), flush=True)
