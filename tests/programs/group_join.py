"""Each rank makes its parity's communicator with ``Create_group`` in every step (every rank of
``comm`` calls it, naming its own group), uses it and frees it; fault point ``join`` right before
the call lets a test kill a member there while the others are inside it. Open MPI's own
``Create_group`` is not fault tolerant: before the twenty-sixth session the other members waited
in it for ever and the job hung (``bench/strangers/parity_groups.py``); dpmpi makes it as a
``Split`` of ``comm``, which fails there, and the step is repaired and redone. Every step adds
the group's sum of ranks, ``comm``'s, and this rank's rank in the group. Prints each rank's
state after N steps."""
import json
import sys

import dpmpi
import numpy as np
from dpmpi import faults

n = int(sys.argv[1])
comm = dpmpi.init()
r, size = comm.Get_rank(), comm.Get_size()
x = np.zeros(3, dtype=np.int64)
rt = dpmpi.Runtime(comm, {"x": x})


def step(k):
    world = comm.Get_group()
    mine = world.Incl([q for q in range(size) if q % 2 == r % 2])
    world.Free()
    faults.point("join")
    pair = comm.Create_group(mine, tag=3)
    mine.Free()
    s = (pair.allreduce(r), comm.allreduce(r), pair.Get_rank())
    pair.Free()
    with rt.update():
        x[:] += s


rt.run(step, n)
print(json.dumps({"event": "done", "rank": r, "x": x.tolist(), "role": comm.role.value}), flush=True)
