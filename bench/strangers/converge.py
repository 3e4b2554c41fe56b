"""A stranger's program (written from the README only): an iterative solver run in chunks until
it converges. The Runtime is made first; the initial field comes from rank 0 (Bcast) and a
tolerance from an allreduce; then ``rt.run`` is called again and again, 10 steps more each time,
with an allreduce of the change over the chunk between the calls deciding whether to go on (so a
death can land in the set-up, in a run, or between two runs). Prints the ranks' digests on rank 0.
As a stranger wrote it, the field before the chunk is a copy made between the runs; a process
that replaces a dead rank makes that copy from the arrays it built, not the dead rank's
(docs/runtime.md), and a death in the chunk where the run converges makes the job run one chunk
more. PREV=1: the copy is part of the state, made in the chunk's first step (the workaround).
    LO=0.3 HI=6 bench/strangers/loop.sh converge.py 400 20"""
import hashlib
import json
import os
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

limit = int(sys.argv[1]) if len(sys.argv) > 1 else 400
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
u = np.zeros(2_000_000)
prev = np.zeros_like(u)  # (PREV=1: the field at the start of the chunk, in the state)
in_state = os.environ.get("PREV") == "1"
rt = dpmpi.Runtime(comm, {"u": u, "prev": prev} if in_state else {"u": u}, snapshot_every=5)
if r == 0:
    u[...] = np.random.default_rng(3).standard_normal(u.size)
comm.Bcast(u, root=0)
u[...] = u * (1.0 + 0.01 * r)                         # each rank's own piece
tol = comm.allreduce(2e-2 * (r + 1), op=MPI.MIN)  # (reached after 190 steps)


def step(k):
    left, right = np.empty(1), np.empty(1)
    comm.Sendrecv(u[-1:], dest=(r + 1) % n, recvbuf=left, source=(r - 1) % n)
    comm.Sendrecv(u[:1], dest=(r - 1) % n, recvbuf=right, source=(r + 1) % n)
    with rt.update():
        if in_state and k % 10 == 0:
            prev[...] = u
        nxt = 0.5 * u + 0.25 * (np.concatenate((left, u[:-1])) + np.concatenate((u[1:], right)))
        u[...] = nxt


steps, residual = 0, np.inf
while residual > tol and steps < limit:
    before = prev if in_state else u.copy()
    steps += 10
    rt.run(step, steps)
    residual = comm.allreduce(float(np.abs(u - before).max()), op=MPI.MAX)
h = hashlib.sha256(u.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history), "steps": steps}), flush=True)
