"""A job that restarts from disk: at start, ``Snapshot.load`` on the communicator
``dpmpi.init()`` returned when ``DIR`` holds snapshot files, then a ``Runtime`` (``persist_dir``
every 5 steps) runs the steps not done yet (the global step count is in the state). Prints one
JSON line per rank: its digest, the step it started at, its role and recoveries.
Arguments: STEPS DIR."""
import hashlib
import json
import os
import sys

import dpmpi
import numpy as np

steps, where = int(sys.argv[1]), sys.argv[2]
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
os.makedirs(where, exist_ok=True)
u = np.cos(np.arange(2048) * (r + 1) / 2048.0)
done = np.zeros(1, dtype=np.int64)
state = {"u": u, "done": done}
if any(name.endswith(".dpmpi") for name in os.listdir(where)):
    dpmpi.Snapshot.load(comm, state, where)
start = int(done[0])
rt = dpmpi.Runtime(comm, state, persist_dir=where, persist_every=5)


def step(k):
    mean = comm.allreduce(float(u.mean())) / n
    with rt.update():
        u[:] = 0.99 * u + 1e-2 * mean + 1e-6 * (start + k)
        done[0] = start + k + 1


rt.run(step, steps - start)
print(json.dumps({"rank": r, "digest": hashlib.sha256(u.tobytes()).hexdigest()[:16], "started_at": start,
                  "role": comm.role.name, "recoveries": len(rt.history)}), flush=True)
