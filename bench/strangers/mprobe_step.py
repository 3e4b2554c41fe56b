"""A stranger's program: messages of sizes unknown to the receiver, taken with a matched probe
(``Mprobe`` then ``message.Recv``, ``Improbe`` polled), as codes with irregular exchanges do.
    ACTIVE=1 HI=2.5 bench/strangers/loop.sh mprobe_step.py 3000 8
A step cut short between `Mprobe` and `msg.Recv` left the sender in the `Wait` of its send for ever
(3 of 30 runs with LO=0.5 HI=1.0, forty-eighth session; dpmpi.message now receives such a message)."""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
x = np.random.default_rng(11 + r).random(4096)
rt = dpmpi.Runtime(comm, {"x": x})

def step(k):
    right, left = (r + 1) % n, (r - 1) % n
    m = 1 + (k * 7 + r * 13) % 1000           # the size the left neighbour cannot know
    req = comm.Isend(x[:m].copy(), dest=right, tag=k % 100)
    st = MPI.Status()
    msg = comm.Mprobe(source=left, tag=k % 100, status=st)
    got = np.empty(st.Get_count(MPI.DOUBLE))
    msg.Recv(got)
    req.Wait()
    # a second exchange polled with Improbe
    req = comm.Isend(np.array([got.sum()]), dest=left, tag=200)
    while True:
        msg = comm.Improbe(source=right, tag=200)
        if msg is not None:
            break
    back = np.empty(1)
    msg.Recv(back)
    req.Wait()
    tot = comm.allreduce(float(back[0]))
    with rt.update():
        x[:] = np.sin(x * 3.1 + got.size * 1e-3) * 0.5 + 0.5
        x[k % x.size] = tot % 1.0

rt.run(step, steps)
h = hashlib.sha256(x.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
