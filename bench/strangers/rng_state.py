"""A stranger's program (written from the README only): SGD-like steps that draw their batch from
a numpy generator made once (``rng = np.random.default_rng(seed)``), the usual way. With
``RNG=1`` (default) the generator is in the Runtime's state; ``RNG=0`` leaves it out, and a
recovered run ends with other digests (the survivors' generators drew past the restored epoch).
Prints the ranks' digests on rank 0.
    bench/strangers/loop.sh rng_state.py 3000 20"""
import hashlib
import json
import os
import sys

import dpmpi
import numpy as np
comm = dpmpi.init()
r = comm.Get_rank()
rng = np.random.default_rng(1234 + r)      # made once, drawn from in every step
w = np.zeros(64)
rt = dpmpi.Runtime(comm, {"w": w, "rng": rng} if os.environ.get("RNG", "1") == "1" else {"w": w})
def step(k):
    batch = rng.standard_normal(64)
    g = np.empty(64)
    comm.Allreduce(batch - w, g)  # (sums over ranks)
    with rt.update():
        w[...] += 0.01 * g
rt.run(step, int(sys.argv[1]))
d = comm.gather(hashlib.sha256(w.tobytes()).hexdigest()[:16], root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
