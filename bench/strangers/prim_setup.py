"""A stranger's program on the primitives (README's second snippet, the loop written out as
examples/primitives.py does): the setup before the first snapshot has collectives (rank 0's
config, a "load" in pieces with an Allreduce after each, rank 0's initial field broadcast), then
a diffusion loop with a halo exchange, committed every 4 steps. Killed from outside at a random
time, the death often lands in that setup. Prints the ranks' digests on rank 0.
    ACTIVE=1 LO=0.3 HI=1.6 bench/strangers/loop.sh prim_setup.py 400 20"""
import hashlib
import itertools
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

N = int(sys.argv[1]) if len(sys.argv) > 1 else 100
FAIL = (dpmpi.ProcFailedError, dpmpi.RevokedError)
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
cfg = comm.bcast({"cells": 4096, "pieces": 8, "nu": 0.2} if r == 0 else None, root=0)
scale = np.zeros(1)
for piece in range(cfg["pieces"]):  # ~1.5 s of "loading"
    m = np.random.default_rng([r, piece]).standard_normal((250, 250))
    for _ in range(12):
        m = np.tanh(m @ m.T / 250)
    s = np.array([1.0 + np.abs(m).sum()])
    comm.Allreduce(MPI.IN_PLACE, s, op=MPI.MAX)
    scale = np.maximum(scale, s)
u = np.random.default_rng(9).random(cfg["cells"] * n) if r == 0 else np.empty(cfg["cells"] * n)
comm.Bcast(u, root=0)
mine = u[r * cfg["cells"]:(r + 1) * cfg["cells"]].copy() / scale[0]
total = np.zeros(1)
snap = dpmpi.Snapshot(comm, {"u": mine, "total": total})


def recover(repair, k):
    """Respawn (not on a replacement just called in) and restore; a failure in either tries
    again. Nothing to restore yet (-1, from as_built=True): commit the first epoch again."""
    for attempt in itertools.count():
        try:
            if repair or attempt:
                comm.Respawn()
            epoch = snap.restore(carry=k, as_built=k < 0)
            if epoch >= 0:
                return epoch
            snap.stage()
            snap.commit(0)
            return 0
        except FAIL:
            pass


if comm.role is dpmpi.Role.RECOVERED:
    k = recover(False, -1)
else:
    try:
        snap.stage()
        snap.commit(0)
        k = 0
    except FAIL:
        k = recover(True, -1)
while True:
    try:
        while k < N:
            halo = np.empty(2)
            comm.Sendrecv(mine[:1].copy(), dest=(r - 1) % n, recvbuf=halo[1:], source=(r + 1) % n)
            comm.Sendrecv(mine[-1:].copy(), dest=(r + 1) % n, recvbuf=halo[:1], source=(r - 1) % n)
            ext = np.concatenate([halo[:1], mine, halo[1:]])
            mine[:] = mine + cfg["nu"] * (ext[:-2] - 2 * mine + ext[2:])
            s = np.array([mine.sum()])
            comm.Allreduce(MPI.IN_PLACE, s, op=MPI.SUM)
            total += s
            k += 1
            if k % 4 == 0 or k == N:
                snap.stage()
                snap.commit(k)
        comm.Barrier()
        break
    except FAIL:
        k = recover(True, k)
h = hashlib.sha256(mine.tobytes() + total.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": hashlib.sha256("".join(d).encode()).hexdigest()[:16],
                      "recoveries": comm.repairs}))
