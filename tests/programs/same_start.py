"""Runtime(same_start=True) over starting arrays that are the same on every rank, or (--differ)
that hold the rank's number: each rank prints its result or the error its run raised."""
import json
import sys

import numpy as np

import dpmpi

comm = dpmpi.init(wait=False)
w = np.full(8, float(comm.Get_rank()) if "--differ" in sys.argv else 1.0)
rt = dpmpi.Runtime(comm, {"w": w}, same_start=True)


def step(k):
    with rt.update():
        w[:] += k


try:
    rt.run(step, 4)
    out = {"event": "final", "w": w.tolist(), "wid": comm.process_id, "role": comm.role.value}
except ValueError as exc:
    out = {"event": "refused", "error": str(exc)}
print(json.dumps({"rank": comm.Get_rank(), **out}), flush=True)
