"""A stranger's program: MPI-4 persistent collectives made in each step, as limitations.md
advises (``Allreduce_init`` started three times, ``Bcast_init`` once), freed in the step.
Prints the digests on rank 0.
    bench/strangers/loop.sh persistent_coll.py 1500 12"""
import hashlib, json, sys
import dpmpi
import numpy as np
from mpi4py import MPI
steps = int(sys.argv[1])
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
x = np.zeros(8)
rt = dpmpi.Runtime(comm, {"x": x})
def step(k):
    src, dst = np.array([x[0] + r, x[1] * r]), np.empty(2)
    req = comm.Allreduce_init(src, dst, op=MPI.SUM)
    try:
        for _ in range(3):
            req.Start()
            req.Wait()
            src += 1
    finally:
        req.Free()
    b = np.array([x[2] + k]) if r == 0 else np.empty(1)
    breq = comm.Bcast_init(b, root=0)
    breq.Start(); breq.Wait(); breq.Free()
    with rt.update():
        x[...] = np.tanh(x + 1e-3 * (dst.sum() + b[0]) + 1e-4 * np.arange(8))
rt.run(step, steps)
h = hashlib.sha256(x.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
