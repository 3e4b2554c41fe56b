"""A stranger's program (written from the README and docs/spares.md only): no spare at all, so a
dead rank's place is taken by a process that policy "respawn" starts (DPMPI_ON_DEPLETED=respawn),
which builds its arrays from nothing and restores them. The state mixes a Fortran-ordered array,
a 0-d counter and an int32 table; each step exchanges halo rows with Sendrecv, and uses scan,
exscan and a pickled allgather. A snapshot every 2 steps. Prints the ranks' digests on rank 0.
    SPARES=0 DPMPI_ON_DEPLETED=respawn bench/strangers/loop.sh respawn_runtime.py 200 20"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 60
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
rng = np.random.default_rng(77 + r)
u = np.asfortranarray(rng.standard_normal((900, 400)))      # column-major
count = np.zeros((), dtype=np.int64)                         # a 0-d array
table = np.arange(4096, dtype=np.int32) * (r + 1)
rt = dpmpi.Runtime(comm, {"u": u, "count": count, "table": table}, snapshot_every=2)


def step(k):
    up, down = (r - 1) % n, (r + 1) % n
    top = np.ascontiguousarray(u[0])
    halo = np.empty_like(top)
    comm.Sendrecv(top, dest=up, sendtag=k, recvbuf=halo, source=down, recvtag=k)
    mine = int(table[k % 4096])
    before = comm.exscan(mine, op=MPI.SUM)
    upto = comm.scan(mine, op=MPI.SUM)
    norms = comm.allgather(float(np.linalg.norm(u[:, k % 400])))
    lap = u[:-2] + u[2:] - 2.0 * u[1:-1]
    with rt.update():
        u[1:-1] += 1e-3 * lap
        u[-1] = 0.5 * (u[-1] + halo)
        u[:, k % 400] /= 1.0 + max(norms)
        table[(k * 7) % 4096] ^= (upto - (before or 0)) & 0xFFFF
        count[...] += 1


rt.run(step, steps)
h = hashlib.sha256()
for a in (u, count, table):
    h.update(np.ascontiguousarray(a).tobytes())
d = comm.gather(h.hexdigest()[:16], root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history), "count": int(count), "size": n}), flush=True)
