"""One job for bench/restore_speed.py: Runtime over a state of never-written (np.zeros) or written
arrays; prints each rank's restore record as one JSON line. Not a user example."""
import argparse
import json
import time

import dpmpi
import numpy as np

p = argparse.ArgumentParser()
p.add_argument("--state-mib", type=float, default=64)
p.add_argument("--touched", type=int, choices=(0, 1), default=0)
p.add_argument("--steps", type=int, default=8)
a = p.parse_args()
comm = dpmpi.init()  # a cold spare: it makes its arrays after it is called in
state = {"a": np.zeros(int(a.state_mib * 2**20) // 8)}
if a.touched:
    state["a"][:] = 1.0
rt = dpmpi.Runtime(comm, state)


def step(k):
    dpmpi.faults.point("step")
    with rt.update():
        state["a"][:8] += 1.0  # one page written: the rest stays as made
    comm.Barrier()


rt.run(step, a.steps)
for rec in rt.history:
    print(json.dumps({"rank": comm.Get_rank(), "role": comm.role.value, "restore": rec.as_dict()["restore"]}), flush=True)
rt.close()
