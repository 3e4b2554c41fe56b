"""A stranger's program: a communicator derived from a derived one in every step (each pair of
ranks Dups its row every step and frees it), beside a child kept whose parent was freed at once
(thirteenth session; 4 active ranks).
    DPMPI_FAULTS=1:nested@6:KILL .venv/bin/dpmpi-run -n 6 --spares 2 -- \\
        .venv/bin/python bench/strangers/nested_per_step.py 100"""
import hashlib
import json
import sys

import dpmpi
import numpy as np

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
comm = dpmpi.init()
r = comm.Get_rank()
row = comm.Split(r // 2, r)  # {0, 1}, {2, 3}
kept = {}
x = np.zeros(3, dtype=np.int64)
rt = dpmpi.Runtime(comm, {"x": x})


def step(k):
    sub = row.Dup()  # made from a derived communicator, freed in the same step
    dpmpi.faults.point("nested")
    a = sub.allreduce(r + k)
    sub.Free()
    if k >= 3 and "c" not in kept:  # a child kept, its parent freed at once
        p = comm.Split(r % 2, r)
        kept["c"] = p.Dup()
        p.Free()
    c = kept["c"].allreduce(1) if "c" in kept else 0
    with rt.update():
        x[:] += (a, c, row.allreduce(k))


rt.run(step, steps)
d = comm.gather(hashlib.sha256(x.tobytes()).hexdigest()[:16], root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history), "tracked": comm.derived_tracked}), flush=True)
