"""A communicator derived from a derived one in every step (each row's ``Dup``, freed in the
step), and, from step 3, a child kept whose parent was freed at once (``p = comm.Split(...)``,
``p.Dup()``, ``p.Free()``): bench/strangers/nested_per_step.py. The twenty-sixth session's first
version of the repair's hand-over looked for the members of the kept child's instance in its
freed parent only, found none, and left the replacement to make the child later while the
survivors made it in the repair: every kill hung the job. Every step adds the row's sum of
``r + k``, the kept child's sum of 1 (0 before step 3) and the row's sum of ``k``. Prints each
rank's state after N steps."""
import json
import sys

import dpmpi
import numpy as np
from dpmpi import faults

n = int(sys.argv[1])
comm = dpmpi.init()
r = comm.Get_rank()
row = comm.Split(r // 2, r)  # {0, 1}, {2, 3}
kept = {}
x = np.zeros(3, dtype=np.int64)
rt = dpmpi.Runtime(comm, {"x": x})


def step(k):
    sub = row.Dup()
    faults.point("nested")
    a = sub.allreduce(r + k)
    sub.Free()
    if k >= 3 and "c" not in kept:
        p = comm.Split(r % 2, r)
        kept["c"] = p.Dup()
        p.Free()
    c = kept["c"].allreduce(1) if "c" in kept else 0
    with rt.update():
        x[:] += (a, c, row.allreduce(k))


rt.run(step, n)
print(json.dumps({"event": "done", "rank": r, "x": x.tolist(), "role": comm.role.value}), flush=True)
