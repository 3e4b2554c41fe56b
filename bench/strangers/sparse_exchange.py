"""A stranger's program (written from the README only): a sparse data exchange in every step by
the "non-blocking consensus" pattern (NBX, Hoefler et al.): each rank sends a variable number of
items to a few ranks of its choosing with ``Issend``, receives whatever arrives with
``Improbe`` + ``Message.Recv`` from ``MPI.ANY_SOURCE``, and, once its own sends are matched,
enters an ``Ibarrier``; the exchange ends when the barrier completes. Nobody knows in advance who
sends to whom. Prints the ranks' digests on rank 0.
    bench/strangers/loop.sh sparse_exchange.py 600 20"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 600
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
acc = np.zeros(64)
counts = np.zeros(n, dtype=np.int64)          # how many items came from each rank, all steps
rt = dpmpi.Runtime(comm, {"acc": acc, "counts": counts})


def step(k):
    g = np.random.default_rng([k, r])
    targets = sorted({int(t) for t in g.integers(0, n, 2)} - {r})
    out = {t: g.standard_normal(int(g.integers(1, 40))) + acc[t % 64] for t in targets}
    tag = 10 + k % 1000  # a rank done with step k may already send step k + 1's items
    sends = [comm.Issend(out[t], dest=t, tag=tag) for t in targets]
    got, barrier = {}, None
    status = MPI.Status()
    while True:
        msg = comm.Improbe(source=MPI.ANY_SOURCE, tag=tag, status=status)
        if msg is not None:
            buf = np.empty(status.Get_count(MPI.DOUBLE))
            msg.Recv(buf)
            got[status.Get_source()] = buf
        if barrier is None:
            if MPI.Request.Testall(sends):
                barrier = comm.Ibarrier()
        elif barrier.Test():
            break
    with rt.update():
        for src in sorted(got):
            acc[: min(64, got[src].size)] += 1e-3 * got[src][:64]
            counts[src] += got[src].size
        acc[...] = np.tanh(acc)


rt.run(step, steps)
h = hashlib.sha256(acc.tobytes() + counts.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history), "items": int(counts.sum())}), flush=True)
