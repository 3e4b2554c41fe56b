"""A stranger's program: MPI-4's nonblocking ``Isendrecv`` and ``Isendrecv_replace`` around a ring
in every step, completed with one ``Waitall``.
    ACTIVE=1 HI=2.5 bench/strangers/loop.sh isendrecv_step.py 3000 8
2 of 8 runs hung (forty-eighth session): Open MPI 5.0.11's Isendrecv request never fails when
its peer dies. dpmpi's is a receive plus a send of a copy since the forty-ninth session
(dpmpi/isendrecv.py)."""
import hashlib, json, sys
import dpmpi, numpy as np
from mpi4py import MPI
steps = int(sys.argv[1])
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
x = np.random.default_rng(r).random(4096)
rt = dpmpi.Runtime(comm, {"x": x})
def step(k):
    got = np.empty(1024)
    q1 = comm.Isendrecv(x[:1024].copy(), (r + 1) % n, k % 50, got, (r - 1) % n, k % 50)
    buf = x[1024:2048].copy()
    q2 = comm.Isendrecv_replace(buf, (r - 1) % n, 60, (r + 1) % n, 60)
    MPI.Request.Waitall([q1, q2])
    s = comm.allreduce(float(got.sum() + buf.sum()))
    with rt.update():
        x[:] = np.sin(x + s * 1e-4) * 0.5 + 0.5
rt.run(step, steps)
h = hashlib.sha256(x.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
