"""Two ``dpmpi.Runtime``s one after the other over the same array and the same ``persist_dir``
(a training's two phases: 2 * STEPS steps, then STEPS more at another rate), one in-memory
copy each. Prints one JSON line per rank: its digest and the recoveries. Arguments: STEPS DIR."""
import hashlib
import json
import os
import sys

import dpmpi
import numpy as np

steps, where = int(sys.argv[1]), sys.argv[2]
comm = dpmpi.init()
r = comm.Get_rank()
os.makedirs(where, exist_ok=True)
w = np.cos(np.arange(2048) * (r + 1) / 2048.0)


def make_step(rt, lr):
    def step(k):
        g = np.sin(w * (k + 1))
        s = comm.allreduce(float(g.sum()))
        with rt.update():
            w[:] = w - lr * g + 1e-6 * s
    return step


first = dpmpi.Runtime(comm, {"w": w}, persist_dir=where, persist_every=5)
first.run(make_step(first, 1e-3), 2 * steps)
second = dpmpi.Runtime(comm, {"w": w}, persist_dir=where, persist_every=5)
second.run(make_step(second, 5e-4), steps)
print(json.dumps({"rank": r, "digest": hashlib.sha256(w.tobytes()).hexdigest()[:16],
                  "recoveries": len(first.history) + len(second.history)}), flush=True)
