"""Two halves of the job joined by an intercommunicator made before the loop
(``half.Create_intercomm`` with dpmpi.init's communicator as the peer), its ``Merge`` and a ``Dup``
of it, all kept through repairs; every step uses the three (bench/strangers/intercomm_halves.py
hung at its first failure before the thirty-seventh session: no repair rebuilt them). Prints each
rank's state after N steps: failure-free, N times (the other half's sum of ranks, the merged
communicator's sum of ranks, the other half's size).

    dpmpi-run -n 5 --spares 1 -- python intercomm_kept.py N"""
import json
import sys

import dpmpi
import numpy as np

n = int(sys.argv[1])
comm = dpmpi.init()
r = comm.Get_rank()
half = comm.Split(r % 2, r)
inter = half.Create_intercomm(0, comm, 1 - r % 2, tag=3)  # leaders: ranks 0 and 1
merged = inter.Merge(high=bool(r % 2))  # the even half first
twin = inter.Dup()
x = np.zeros(3, dtype=np.int64)
rt = dpmpi.Runtime(comm, {"x": x})


def step(k):
    s = (inter.allreduce(r), merged.allreduce(merged.Get_rank()), twin.allreduce(1))
    with rt.update():
        x[:] += s


rt.run(step, n)
print(json.dumps({"event": "done", "rank": r, "x": x.tolist(), "role": comm.role.value, "recoveries": len(rt.history),
                  "merged": [merged.Get_rank(), merged.Get_size()], "remote": inter.Get_remote_size(),
                  "types": [type(c).__name__ for c in (inter, merged, twin)]}), flush=True)
