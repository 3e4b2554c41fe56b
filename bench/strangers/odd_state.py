"""A stranger's program: a state of 300 small arrays (a model with many layers), mixed dtypes
(float16, complex128, bool, int8, a structured record), sizes uneven across ranks, and the last
rank owning an empty slice (np.empty(0)) of a decomposed vector."""
import sys, hashlib, json
import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
rng = np.random.default_rng(11 + r)
layers = {f"l{i}": rng.standard_normal(17 + (i * 7 + r) % 50) for i in range(300)}
rows = 10 if r < n - 1 else 0
state = dict(layers)
state["slice"] = np.ones(rows)                     # empty on the last rank
state["half"] = np.zeros(33 + r, dtype=np.float16)
state["z"] = np.zeros(5, dtype=np.complex128)
state["mask"] = np.zeros(64, dtype=bool)
state["small"] = np.zeros(7, dtype=np.int8)
state["rec"] = np.zeros(3, dtype=[("k", np.int64), ("v", np.float32)])
rt = dpmpi.Runtime(comm, state)

def step(k):
    g = np.array([sum(float(a[0]) for a in layers.values())])
    comm.Allreduce(MPI.IN_PLACE, g)
    with rt.update():
        for i, a in enumerate(layers.values()):
            a *= 0.999
            a[k % a.size] += 1e-3 * g[0] / n
        state["slice"] += 1
        state["half"] += np.float16(0.5)
        state["z"] += 1j * k
        state["mask"][k % 64] ^= True
        state["small"] += 1
        state["rec"]["k"] += k
        state["rec"]["v"] += np.float32(0.25)
    import time; time.sleep(0.005)

rt.run(step, steps)
h = hashlib.sha256()
for name in sorted(state):
    h.update(state[name].tobytes())
d = comm.gather(h.hexdigest()[:16], root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
