"""A library's own communicator made once with ``Idup`` before the Runtime's loop and used in
every step. A true ``Idup`` is not rebuilt by a repair: the job hung at its first failure (the
replacement's setup made its own with nobody). On ``dpmpi.init``'s communicator ``Idup`` is made
as a ``Dup`` that repairs rebuild, with a completed request. Prints one JSON line per rank."""
import json

import numpy as np

import dpmpi

comm = dpmpi.init()
lib, req = comm.Idup()
req.Wait()
x = np.ones(4) * (comm.Get_rank() + 1)
rt = dpmpi.Runtime(comm, {"x": x})


def step(k):
    dpmpi.faults.point("step")
    s = lib.allreduce(float(x[0]))
    with rt.update():
        x[:] = x * 0.5 + s * 1e-3


rt.run(step, 60)
print(json.dumps({"event": "final", "rank": comm.Get_rank(), "x": float(x.sum()), "recoveries": len(rt.history)}),
      flush=True)
rt.close()
