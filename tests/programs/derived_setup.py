"""Collectives on derived communicators outside dpmpi.Runtime's runs, which a replacement must
redo from its group's survivors' record (dpmpi.resilient.prologue_derived). Before the first run:
pairs (``comm.Split``, by parity with ``--parity``: ranks 0 and 2 are one pair) whose first rank
``Bcast``s the pair's weights, an ``allreduce`` and a ``bcast`` on the pair, an ``allgather``
over the pairs' leaders (a ``Split`` with ``MPI.UNDEFINED`` elsewhere), a ``Barrier`` on a
node-local ``Split_type``, an ``allreduce`` on a communicator of one rank (every member of it
dies with its rank: the replacement makes it for real), and rooted ones on the pair (``Scatter``
and ``scatter`` from its first rank, ``gather`` and ``Reduce`` to its second, ``reduce`` to its
first), and rank-dependent ones (``exscan``, an in-place ``Scan``, ``Exscan``, ``alltoall``,
``Alltoall``, ``Allgatherv``, ``Scatterv``, ``Gatherv``, ``Alltoallv``, ``Reduce_scatter_block``,
``Reduce_scatter`` on ``comm``; ``exscan``, ``scan``, ``alltoall``, ``Scatterv`` on the pair). Between the two runs,
an ``allreduce``, a ``reduce`` and a ``scan`` on the pair and an ``exscan`` on ``comm``. ``--runtime-first``:
the Runtime is made before those calls, so a death in one of them is repaired there
(DPMPI_FAULTS=1:Bcast@1:KILL). ``--drift=R``: rank R makes the pair's rank-dependent calls only
once the other pair's ranks have made theirs and gone on towards the first snapshot (told by a
message on the raw ``MPI.COMM_WORLD`` taken before ``dpmpi.init()``, whose guarded world refuses
point to point; in the job's first processes only), so that a death of
rank R there meets the ranks in two places (R=3: 2 in the setup, 0 and 1 in the first snapshot;
R=1: 0 in the setup, 2 and 3 in the first snapshot). Prints a line
"final" per rank: its digest, recoveries and role."""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
world = MPI.COMM_WORLD  # (mpi4py's own object: dpmpi.init() puts a guarded one in its place)
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
pair = comm.Split(r % 2 if "--parity" in sys.argv else r // 2, r)
leaders = comm.Split(0 if pair.Get_rank() == 0 else MPI.UNDEFINED, r)
node = comm.Split_type(MPI.COMM_TYPE_SHARED, r)
alone = comm.Split(r, 0)

w, x = np.zeros(512), np.zeros(512)
if "--runtime-first" in sys.argv:  # (then a death in the setup's calls on pair, leaders, ... is repaired there)
    rt = dpmpi.Runtime(comm, {"w": w, "x": x}, snapshot_every=3)
if pair.Get_rank() == 0:
    w[:] = np.random.default_rng(10 + r).standard_normal(w.size)
pair.Bcast(w, root=0)
top = pair.allreduce(float(np.abs(w).max()), op=MPI.MAX)
norms = leaders.allgather(float(np.linalg.norm(w))) if leaders != MPI.COMM_NULL else None
norm = pair.bcast(sum(norms) if norms else None, root=0)
node.Barrier()
mine = alone.allreduce(r + 1)
# rooted ones on the pair: its first rank scatters, its second gathers and reduces
part, red = np.zeros(2), np.zeros(2)
pair.Scatter(np.arange(4.0) + 10 * r if pair.Get_rank() == 0 else None, part, root=0)
got = pair.scatter([r + 0.25, r + 0.5] if pair.Get_rank() == 0 else None, root=0)
told = pair.gather(float(part.sum()) + got, root=1)
pair.Reduce(part, red, op=MPI.SUM, root=1)
seen = pair.reduce(float(part[0]), root=0)
# rank-dependent results (an offset from a prefix sum, a personalized exchange)
off = comm.exscan(r + 1) or 0  # (None on rank 0)
pre = np.full(2, float(r + 1))
comm.Scan(MPI.IN_PLACE, pre)
ex = np.zeros(2)
comm.Exscan(np.full(2, 2.0 * r + 1), ex)  # (rank 0's buffer: left as it is)
mix = comm.alltoall([10 * r + j for j in range(n)])
sizes = np.arange(1, n + 1)  # (rank r brings r + 1 values)
every = np.zeros(int(sizes.sum()))
starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
comm.Allgatherv(np.full(r + 1, r + 0.5), [every, sizes, starts, MPI.DOUBLE])
swap = np.zeros(n)
comm.Alltoall(np.arange(n, dtype=float) * (r + 1), swap)
# vector ones and reduce_scatters: rank 0 scatters r + 1 values to rank r, rank 1 gathers them
# back, rank r sends j + 1 values to rank j; on the pair, its first rank scatters
mv = np.zeros(r + 1)
comm.Scatterv([np.arange(float(sizes.sum())) / 4, sizes, starts, MPI.DOUBLE] if r == 0 else None, mv, root=0)
back = np.zeros(int(sizes.sum())) if r == 1 else None
comm.Gatherv(mv * 3, [back, sizes, starts, MPI.DOUBLE] if r == 1 else None, root=1)
vex = np.zeros(n * (r + 1))
comm.Alltoallv([np.arange(float(sizes.sum())) * (r + 1), sizes], [vex, [r + 1] * n])
blk, rsv = np.zeros(2), np.zeros(r + 1)
comm.Reduce_scatter_block(np.arange(2.0 * n) * (r + 1), blk, op=MPI.SUM)
comm.Reduce_scatter(np.arange(float(sizes.sum())) + r, rsv, recvcounts=sizes, op=MPI.SUM)
pv = np.zeros(pair.Get_rank() + 1)
pair.Scatterv([np.arange(3.0) + r, [1, 2]] if pair.Get_rank() == 0 else None, pv, root=0)
vectors = (float(back @ np.arange(back.size)) if back is not None else 0.0) + float(vex @ np.arange(vex.size)) \
    + float(blk.sum() + rsv.sum() + pv.sum() + mv.sum())
late = next((int(a.split("=")[1]) for a in sys.argv if a.startswith("--drift=")), -1)
ahead = [q for q in range(4) if q // 2 != late // 2] if late >= 0 and comm.role is dpmpi.Role.INITIAL else []
if r == late and ahead:
    for src in ahead:
        world.recv(source=src, tag=77)
poff, psum, pmix = pair.exscan(r + 1) or 0, pair.scan(float(r)), pair.alltoall([r, -2 * r])
if r in ahead:
    world.send(None, dest=late, tag=77)
ranked = (off + float(pre.sum()) + float(ex.sum()) + sum(mix) + float(every @ np.arange(every.size))
          + float(swap @ np.arange(1.0, n + 1)) + poff + psum + vectors)
w /= top * norm
x[:] = float(mine) + sum(told or []) + float(red.sum()) + (seen or 0.0) + 1e-2 * (ranked + sum(pmix))
if "--runtime-first" not in sys.argv:
    rt = dpmpi.Runtime(comm, {"w": w, "x": x}, snapshot_every=3)


def step(k):
    g = np.empty_like(w)
    pair.Allreduce(np.tanh(w * x), g, op=MPI.SUM)
    total = comm.allreduce(float(g.sum()))
    with rt.update():
        x[:] = 0.9 * x + 0.1 * g
        w[:] += 1e-3 * g - 1e-6 * total


rt.run(step, steps // 2)
shift = pair.allreduce(float(x.sum()))  # (between the runs: answered from the record too)
lead = pair.reduce(float(w.sum()), op=MPI.MAX, root=1)
below = comm.exscan(float(x.sum())) or 0.0
upto = pair.scan(float(w.sum()))
x += 1e-3 * shift + 1e-4 * (lead or 0.0) + 1e-5 * below + 1e-5 * upto
rt.run(step, steps)
print(json.dumps({"event": "final", "rank": r, "digest": hashlib.sha256(w.tobytes() + x.tobytes()).hexdigest()[:16],
                  "recoveries": len(rt.history), "role": comm.role.value}), flush=True)
rt.close()
