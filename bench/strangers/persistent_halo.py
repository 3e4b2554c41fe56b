"""A stranger's program (written from the README only): a 1-D heat equation under dpmpi.Runtime
whose halo exchange uses persistent requests made once before the loop (Send_init/Recv_init,
Startall/Waitall each step: a common HPC idiom), with the global residual from an Iallreduce
overlapped with the interior update. Prints the ranks' digests on rank 0.
    bench/strangers/loop.sh persistent_halo.py 400 20"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
m = 200_000
u = np.zeros(m + 2)
u[1:-1] = np.sin(np.linspace(0, np.pi, m) * (r + 1))
res = np.zeros(1)
rt = dpmpi.Runtime(comm, {"u": u, "res": res})

left, right = (r - 1) % n, (r + 1) % n
sl, sr = np.empty(1), np.empty(1)
gl, gr = np.empty(1), np.empty(1)
halo = [comm.Send_init(sl, dest=left, tag=1), comm.Send_init(sr, dest=right, tag=2),
        comm.Recv_init(gr, source=right, tag=1), comm.Recv_init(gl, source=left, tag=2)]


def step(k):
    sl[0], sr[0] = u[1], u[-2]
    MPI.Prequest.Startall(halo)
    new = u[1:-1] + 0.1 * (u[:-2] - 2 * u[1:-1] + u[2:])
    MPI.Request.Waitall(halo)
    local = np.array([float(np.abs(new - u[1:-1]).sum())])
    total = np.empty(1)
    req = comm.Iallreduce(local, total, op=MPI.SUM)
    new[0] += 0.1 * (gl[0] - u[1])   # the halo terms, once the exchange is done
    new[-1] += 0.1 * (gr[0] - u[-2])
    req.Wait()
    with rt.update():
        u[1:-1] = new
        u[0], u[-1] = gl[0], gr[0]
        res[0] = total[0]


rt.run(step, steps)
d = comm.gather(hashlib.sha256(u.tobytes() + res.tobytes()).hexdigest()[:16], root=0)
if r == 0:
    sys.stdout.write(json.dumps({"digest": d, "recoveries": len(rt.history)}) + "\n")
