"""A stranger's program: a master that takes its workers' results of unknown size in whatever
order they come (``Mprobe(ANY_SOURCE)``, ``Get_count``, ``msg.Recv``), then broadcasts what it
made of them; the workers' sends are large enough to wait for the master (rendezvous).
    ACTIVE=1 HI=2.5 bench/strangers/loop.sh probe_any.py 4000 8"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
x = np.random.default_rng(17 + r).random(2048)
rt = dpmpi.Runtime(comm, {"x": x})

def step(k):
    tag = k % 64
    if r == 0:
        parts = [None] * n
        for _ in range(n - 1):
            st = MPI.Status()
            msg = comm.Mprobe(source=MPI.ANY_SOURCE, tag=tag, status=st)
            buf = np.empty(st.Get_count(MPI.DOUBLE))
            msg.Recv(buf)
            parts[st.Get_source()] = buf
        out = np.array([sum(float(p.sum()) for p in parts[1:])])
    else:
        m = 600 + (k * 31 + r * 7) % 1400           # 4.7-16 KiB: waits for the master
        comm.Isend(x[:m].copy(), dest=0, tag=tag).Wait()
        out = np.empty(1)
    comm.Bcast(out, root=0)
    with rt.update():
        x[:] = np.sqrt(x * 0.7 + 0.3 * (out[0] % 1.0))

rt.run(step, steps)
h = hashlib.sha256(x.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
