"""A stranger's program: each rank makes its parity's communicator with ``Create_group`` on the
communicator ``dpmpi.init()`` returned, naming its own group (disjoint groups, as MPI allows),
before the loop; an allreduce on it and on ``comm`` every step. Before the twenty-sixth session a
repair handed the replacement rank 0's group: it was not in it, and its own group's survivors
waited inside ``Create_group`` for ever (the job hung). Prints the digests on rank 0.
    bench/strangers/loop.sh parity_groups.py 1500 20"""
import hashlib
import json
import sys

import dpmpi
import numpy as np

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 1500
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
world = comm.Get_group()
mine = world.Incl([q for q in range(n) if q % 2 == r % 2])
pair = comm.Create_group(mine, tag=3)
world.Free()
mine.Free()
x = np.zeros(8)
rt = dpmpi.Runtime(comm, {"x": x})


def step(k):
    a = pair.allreduce(float(x[0] + r))
    with rt.update():
        x[...] = np.tanh(x + 1e-3 * (a + comm.allreduce(float(x[1] * r))) + 1e-4 * np.arange(8))


rt.run(step, steps)
h = hashlib.sha256(x.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
