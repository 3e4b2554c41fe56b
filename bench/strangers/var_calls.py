"""A stranger's program (written from the README only), using calls no other stranger uses: pickled
non-blocking point-to-point (``isend``/``irecv``, completed by mpi4py's ``MPI.Request.waitall``,
which returns the objects), vector collectives (``Allgatherv``, ``Gatherv``/``Scatterv`` with
counts that change every step), non-blocking rooted collectives (``Ibcast``, ``Ireduce``), a
synchronous ``Ssend``, a pickled buffered ``bsend`` (with ``MPI.Attach_buffer``) and a matched probe
(``mprobe`` + ``Message.recv``). Runtime, a snapshot every 2 steps. Prints the digests on rank 0.
    bench/strangers/loop.sh var_calls.py 400 20"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 400
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
x = np.zeros(32)
hist = np.zeros(8, dtype=np.int64)
MPI.Attach_buffer(bytearray(1 << 16))
rt = dpmpi.Runtime(comm, {"x": x, "hist": hist}, snapshot_every=2)


def step(k):
    g = np.random.default_rng([k, r])
    right, left = (r + 1) % n, (r - 1) % n
    # pickled ring, both ways
    reqs = [comm.isend({"k": k, "v": float(x[r])}, dest=right, tag=1),
            comm.irecv(source=left, tag=1)]
    got = MPI.Request.waitall(reqs)[1]
    # counts vary by step and rank
    counts = [1 + (k + i) % 5 for i in range(n)]
    mine = np.full(counts[r], x[(k + r) % 32] + r)
    allv = np.empty(sum(counts))
    comm.Allgatherv(mine, [allv, counts])
    root = k % n
    gathered = np.empty(sum(counts)) if r == root else None
    comm.Gatherv(mine, [gathered, counts] if r == root else None, root=root)
    part = np.empty(counts[r])
    comm.Scatterv([gathered, counts] if r == root else None, part, root=root)
    b = np.array([g.standard_normal()]) if r == root else np.empty(1)
    req = comm.Ibcast(b, root=root)
    red = np.empty(1) if r == root else None
    req2 = comm.Ireduce(np.array([float(part.sum())]), red, op=MPI.SUM, root=root)
    MPI.Request.Waitall([req, req2])
    # synchronous and buffered sends around the ring, a matched probe to receive
    if r % 2 == 0:
        comm.Ssend(np.array([x[0] + k]), dest=right, tag=2)
        buf = np.empty(1)
        comm.Recv(buf, source=left, tag=2)
    else:
        buf = np.empty(1)
        comm.Recv(buf, source=left, tag=2)
        comm.Ssend(np.array([x[0] + k]), dest=right, tag=2)
    comm.bsend((float(k), float(x[1])), dest=left, tag=3)
    msg = comm.mprobe(source=right, tag=3)
    pair = msg.recv()
    MPI.Request.Waitall([])
    tot = comm.allreduce(float(red[0]) if r == root else 0.0)
    with rt.update():
        x[...] = np.tanh(x + 1e-3 * (allv[: 32].sum() + got["v"] + b[0] + buf[0] + pair[1] + tot)
                         + 1e-4 * np.arange(32))
        hist[k % 8] += counts[r]


rt.run(step, steps)
MPI.Detach_buffer()
h = hashlib.sha256(x.tobytes() + hist.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
