"""A stranger's program: mpi4py's own synchronisation objects (``mpi4py.util.sync``) over
``comm.mpi``, made in every step: a ``Mutex`` (an MCS queue lock on RMA windows, its waiters
woken by messages) guards a read-modify-write of a counter in rank 0's window, and a
``Sequential`` section (a token passed from rank to rank) builds a prefix of the ranks'
values in rank order. Both results are order-independent or ordered, so every run gives the
same digests. Prints them on rank 0.
    ACTIVE=1 HI=2.5 bench/strangers/loop.sh sync_step.py 1500 8"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI
from mpi4py.util.sync import Mutex, Sequential

steps = int(sys.argv[1])
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
x = np.random.default_rng(3 + r).random(16)
acc = np.zeros(2)
rt = dpmpi.Runtime(comm, {"x": x, "acc": acc})


def step(k):
    c = comm.mpi
    win = MPI.Win.Allocate(8 if c.Get_rank() == 0 else 0, 8, comm=c)
    mutex = Mutex(comm=c)
    try:
        if c.Get_rank() == 0:
            win.Lock(0)
            win.Put(np.zeros(1, dtype=np.int64), 0)
            win.Unlock(0)
        c.Barrier()
        with mutex:  # read-modify-write under the lock (an Accumulate would not need it)
            v = np.zeros(1, dtype=np.int64)
            win.Lock(0)
            win.Get(v, 0)
            win.Unlock(0)
            v += 1 + (k + r) % 7
            win.Lock(0)
            win.Put(v, 0)
            win.Unlock(0)
        c.Barrier()
        total = np.zeros(1, dtype=np.int64)
        if c.Get_rank() == 0:
            win.Lock(0)
            win.Get(total, 0)
            win.Unlock(0)
        c.Bcast(total, root=0)
        prefix = np.zeros(1)
        with Sequential(c):  # rank r receives the prefix from r - 1 and passes it on
            if r > 0:
                c.Recv(prefix, source=r - 1, tag=7)
            prefix += x.sum()
            if r < n - 1:
                c.Send(prefix, dest=r + 1, tag=7)
    finally:
        mutex.free()
        win.Free()
    with rt.update():
        x[:] = np.tanh(x + 1e-3 * float(total[0]) + 1e-4 * float(prefix[0]))
        acc[0] += float(total[0])
        acc[1] = float(prefix[0])


rt.run(step, steps)
h = hashlib.sha256(x.tobytes() + acc.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
