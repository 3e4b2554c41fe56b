"""Communicators derived from derived ones, made before the loop: ``half`` splits the job by
parity, ``sub`` splits ``half`` again with keys per rank (reversed order), ``twin`` is a Dup of
``sub``, ``whole`` is ``half`` again from its group (``Create``) and ``lead`` its first rank
alone (``Create_group``); ``pair`` is ranks {0, 1} or {2, 3}, from ``comm`` (``Create_group``,
each rank naming its own: disjoint groups). Each rank holds only its own half's colours and keys for ``sub``, so a replacement
handed another half's record lacked its own (twenty-sixth session: a ``KeyError`` killed the
replacement and the job went on shrunk with another result, exit 0); when both ranks of a half
die together, no survivor knows them at all. Every step adds, for rank r of half h = r % 2 (ranks
h and h + 2): half's sum of ranks, sub's rank-0 rank (h + 2, the larger key's reverse), twin's
sum of squares, sub's rank of this rank, whole's sum of ranks, lead's (h) or -1 outside it, and
pair's sum of ranks (1 or 5).
Each rank's ``Create``/``Create_group`` record names its own half's members: a replacement handed
the other half's made them with those."""
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

n = int(sys.argv[1])
comm = dpmpi.init()
r, size = comm.Get_rank(), comm.Get_size()
half = comm.Split(r % 2, r)
sub = half.Split(0, size - r)
twin = sub.Dup()
group = half.Get_group()
whole = half.Create(group)
lead = half.Create_group(group.Incl([0]))
group.Free()
world = comm.Get_group()
pairs = world.Incl([q for q in range(size) if q // 2 == r // 2])
pair = comm.Create_group(pairs, tag=3)
world.Free()
pairs.Free()
x = np.zeros(7, dtype=np.int64)
rt = dpmpi.Runtime(comm, {"x": x})


def step(k):
    s = (half.allreduce(r), sub.allgather(r)[0], twin.allreduce(r * r), sub.Get_rank(), whole.allreduce(r),
         -1 if lead == MPI.COMM_NULL else lead.allreduce(r), pair.allreduce(r))
    comm.Barrier()
    with rt.update():
        x[:] += s


rt.run(step, n)
print(json.dumps({"event": "done", "rank": r, "x": x.tolist(), "role": comm.role.value,
                  "recoveries": len(rt.history)}), flush=True)
