"""A stranger's program (written from the README only): a distributed 2-D field advanced by a
spectral-like scheme whose every step transposes the field (``Alltoall``), redistributes
uneven pieces (``Alltoallv`` with counts from an ``Exscan``/``Scan``), reduces a spectrum
(``Reduce_scatter_block``), rotates a ring buffer (``Sendrecv_replace``) and overlaps an
``Ialltoall`` with local work. Prints the ranks' digests on rank 0.
    bench/strangers/loop.sh transpose.py 150 20"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 150
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
B = 96                                   # rows per rank; the field is (n*B) x (n*B)
field = np.random.default_rng(r).standard_normal((B, n * B))
ring = np.full(512, float(r))
spec = np.zeros(B * n)
rt = dpmpi.Runtime(comm, {"field": field, "ring": ring, "spec": spec}, snapshot_every=3)


def transpose(a):
    blocks = np.ascontiguousarray(a.reshape(B, n, B).transpose(1, 0, 2))  # n blocks of B x B
    out = np.empty_like(blocks)
    comm.Alltoall(blocks, out)
    return np.ascontiguousarray(out.transpose(0, 2, 1)).reshape(n * B, B).T.copy()


def step(k):
    t = transpose(field)
    t = np.tanh(t * 0.9 + 0.01 * np.roll(t, 1, axis=1))
    # uneven redistribution: rank i sends (k + i + j) % 7 + 1 numbers to rank j
    counts = np.array([(k + r + j) % 7 + 1 for j in range(n)], dtype=np.int64)
    recv_counts = np.empty(n, dtype=np.int64)
    comm.Alltoall(counts, recv_counts)
    src = t.ravel()[: counts.sum()].copy()
    dst = np.empty(recv_counts.sum())
    comm.Alltoallv([src, counts], [dst, recv_counts])
    total = np.array([dst.size], dtype=np.int64)
    before, upto = np.zeros(1, dtype=np.int64), np.empty(1, dtype=np.int64)
    comm.Exscan(total, before)
    comm.Scan(total, upto)
    if r == 0:
        before[0] = 0  # Exscan leaves rank 0's result undefined
    piece = np.abs(np.fft.rfft(t, axis=1)[:, : n]).ravel()[: n * (B // n) * n]
    part = np.empty(piece.size // n)
    comm.Reduce_scatter_block(piece, part, op=MPI.SUM)
    req = comm.Ialltoall(np.full(n, float(k + r)), out := np.empty(n))
    local = t[:, :8].T @ t[:, :8]
    req.Wait()
    buf = ring.copy()
    comm.Sendrecv_replace(buf, dest=(r + 1) % n, source=(r - 1) % n)
    with rt.update():
        field[...] = transpose(t) * 0.99 + 1e-3 * local.sum() / local.size
        ring[...] = 0.5 * (ring + buf) + 1e-6 * (dst.sum() + before[0] - upto[0] + out.sum())
        spec[: part.size] = 0.9 * spec[: part.size] + 0.1 * part


rt.run(step, steps)
h = hashlib.sha256(field.tobytes() + ring.tobytes() + spec.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
