"""Communicators derived with Split_type, Clone, Create and Create_cart, made once before a
dpmpi.Runtime loop and used in every step, and one Split_type made and freed in every step: before
the fourteenth session a repair rebuilt only Split/Dup/Create_group ones, and these hung the job
at its first failure. Also a Split_type with info and a Dup_with_info (before the sixteenth
session: a ValueError, and a communicator no repair rebuilt). The program names the communicator and
the Clone and caches an attribute on each (a repair kept none before the twenty-second session).
Prints each rank's state after N steps."""
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1])
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=r)
twin = comm.Clone()
evens = comm.Create(comm.Get_group().Incl(list(range(0, n, 2))))  # COMM_NULL on odd ranks
ring = comm.Create_cart([n], periods=[True])
hints = MPI.Info.Create()
hints.Set("mpi_assert_no_any_tag", "true")
node_i = comm.Split_type(MPI.COMM_TYPE_SHARED, key=r, info=hints)
twin_i = comm.Dup_with_info(hints)
hints.Free()
KEY = MPI.Comm.Create_keyval()
for c, name in ((comm, "world"), (twin, "twin")):
    c.Set_name(name)
    c.Set_attr(KEY, {"cached": name})
x = np.zeros(4, dtype=np.int64)
rt = dpmpi.Runtime(comm, {"x": x})


def step(k):
    per = comm.Split_type(MPI.COMM_TYPE_SHARED, key=n - r)
    a = per.allreduce(k + r)
    per.Free()
    src, dst = ring.Shift(0, 1)
    b = ring.sendrecv(r * k, dest=dst, source=src)
    e = evens.allreduce(k) if evens else 0
    node_i.Barrier()
    twin_i.Barrier()
    with rt.update():
        x[:] += (a, node.allreduce(1) + twin.allreduce(r), b, e)


rt.run(step, steps)
print(json.dumps({"event": "done", "rank": r, "x": x.tolist(), "recoveries": len(rt.history),
                  "role": comm.role.value, "tracked": comm.derived_tracked,
                  "types": [type(c).__name__ for c in (node, twin, ring, node_i, twin_i)],
                  "names": [comm.Get_name(), twin.Get_name()], "attrs": [comm.Get_attr(KEY), twin.Get_attr(KEY)],
                  "tag_ub": comm.Get_attr(MPI.TAG_UB)}), flush=True)
