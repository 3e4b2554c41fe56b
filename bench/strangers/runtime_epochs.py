"""A stranger's program: training in three "epochs" (three rt.run calls, commit_at_end only at
the last), raw mpi4py calls inside the step (comm.mpi.Allreduce; MPI.Request.Wait on a dpmpi
Iallreduce request), a snapshot every 2 steps.
    bench/strangers/loop.sh runtime_epochs.py 15 15"""
# inside the step, snapshot every 2 steps, a state of several arrays.
import sys, hashlib, json
import dpmpi
import numpy as np
from mpi4py import MPI

per = int(sys.argv[1]) if len(sys.argv) > 1 else 40
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
rng = np.random.default_rng(7 + r)
W = rng.standard_normal((512, 512))
b = np.zeros(512)
count = np.zeros(1, dtype=np.int64)
rt = dpmpi.Runtime(comm, {"W": W, "b": b, "count": count}, snapshot_every=2)

def step(k):
    x = np.random.default_rng([k, r]).standard_normal((64, 512))
    h = np.tanh(x @ W + b)
    g = x.T @ h / 64.0
    comm.mpi.Allreduce(MPI.IN_PLACE, g, op=MPI.SUM)      # raw mpi4py on the communicator
    gb = h.mean(axis=0)
    req = comm.Iallreduce(MPI.IN_PLACE, gb, op=MPI.SUM)
    MPI.Request.Wait(req)                                # mpi4py's own, on a dpmpi request
    with rt.update():
        np.subtract(W, 1e-3 * g / n, out=W)
        np.subtract(b, 1e-3 * gb / n, out=b)
        count[0] += 1

for epoch in range(3):
    rt.run(step, (epoch + 1) * per, commit_at_end=(epoch == 2))
h = hashlib.sha256()
for a in (W, b, count):
    h.update(a.tobytes())
d = comm.gather(h.hexdigest()[:16], root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
