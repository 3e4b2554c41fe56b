"""A stranger's program (written from the README only), using calls no other stranger uses: a
receive from ``MPI.ANY_SOURCE`` posted every step "in case work arrives" and cancelled at the
step's end (``Cancel`` + ``Status.Is_cancelled``), a busy ``Iprobe`` poll for rank 0's message,
a ready-mode send (``Rsend``, its receive posted before a barrier), ``Waitsome`` over a ring's
requests, ``Reduce_scatter`` with counts, ``Igather``/``Iscatter`` and ``Alltoallw``, and
``Neighbor_alltoallv`` on a periodic 1-D Cartesian communicator made before the loop. Runtime,
a snapshot every step. Prints the digests on rank 0.
    bench/strangers/loop.sh poll_cancel.py 2000 20"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 400
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
ring = comm.Create_cart([n], periods=[True])
x = np.zeros(24)
rt = dpmpi.Runtime(comm, {"x": x})


def step(k):
    right, left = (r + 1) % n, (r - 1) % n
    stray = np.empty(4)
    maybe = comm.Irecv(stray, source=MPI.ANY_SOURCE, tag=77)  # nobody sends tag 77
    # rank 0 tells everyone something; the others poll for it
    note = np.empty(1)
    if r == 0:
        sends = [comm.Isend(np.array([x[0] + k]), dest=d, tag=9) for d in range(1, n)]
        note[0] = x[0] + k
    else:
        while not comm.Iprobe(source=0, tag=9):
            pass
        comm.Recv(note, source=0, tag=9)
        sends = []
    # ready mode: the receive is posted before the barrier, the send after it
    ready = np.empty(2)
    rreq = comm.Irecv(ready, source=left, tag=5)
    comm.Barrier()
    comm.Rsend(np.array([x[1] + r, float(k)]), dest=right, tag=5)
    a, b = np.empty(3), np.empty(3)
    reqs = [rreq, comm.Irecv(a, source=left, tag=6), comm.Irecv(b, source=right, tag=6),
            comm.Isend(np.full(3, x[2] + r), dest=right, tag=6), comm.Isend(np.full(3, x[3] - r), dest=left, tag=6),
            *sends]
    done = 0
    while done < len(reqs):
        got = MPI.Request.Waitsome(reqs)
        done += len(got or [])
    # counts change with the step
    counts = [1 + (k + i) % 3 for i in range(n)]
    src = np.arange(sum(counts), dtype=np.float64) + x[4] + r
    part = np.empty(counts[r])
    comm.Reduce_scatter(src, part, counts, op=MPI.SUM)
    root = k % n
    g = np.empty(n) if r == root else None
    q1 = comm.Igather(np.array([part.sum()]), g, root=root)
    q1.Wait()
    sc = np.empty(1)
    q2 = comm.Iscatter(g if r == root else None, sc, root=root)
    q2.Wait()
    # Alltoallw: one double to each rank, at byte displacements
    sbuf = np.array([x[5] + r * 10 + d for d in range(n)])
    rbuf = np.empty(n)
    dt = [MPI.DOUBLE] * n
    disp = [8 * d for d in range(n)]
    comm.Alltoallw([sbuf, [1] * n, disp, dt], [rbuf, [1] * n, disp, dt])
    # neighbours on the ring: 1 value to the left, 2 to the right
    nsend = np.array([x[6] + r, x[7] + r, x[8] - r])
    nrecv = np.empty(3)
    ring.Neighbor_alltoallv([nsend, [1, 2], [0, 1], MPI.DOUBLE], [nrecv, [2, 1], [0, 2], MPI.DOUBLE])
    maybe.Cancel()
    st = MPI.Status()
    maybe.Wait(st)
    assert st.Is_cancelled(), "a tag-77 message arrived"
    with rt.update():
        x[...] = np.tanh(x + 1e-3 * (note[0] + ready.sum() + a.sum() + b.sum() + sc[0] + rbuf.sum()
                                     + nrecv.sum()) + 1e-4 * np.arange(24))


rt.run(step, steps)
h = hashlib.sha256(x.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
