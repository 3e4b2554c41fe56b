"""An ``Idup`` of ``dpmpi.init``'s communicator in every step and, before it is waited for, a
``Split`` of the same communicator and an ``Iallreduce`` on it (Open MPI 5.0.11 hung in that
``Split`` and crossed the ``Iallreduce`` with the ``Idup``. dpmpi first waited for the ``Idup``
(dpmpi.pending_dups, which a plain dpmpi.Comm still does); on ``dpmpi.init``'s communicator an
``Idup`` is now a ``Dup`` made at once). Prints one JSON line per rank: its final state."""
import json

import numpy as np
from mpi4py import MPI

import dpmpi

comm = dpmpi.init()
x = np.ones(4)
rt = dpmpi.Runtime(comm, {"x": x})


def step(k):
    dpmpi.faults.point("step")
    dup, req = comm.Idup()
    sub = comm.Split(comm.Get_rank() % 2, comm.Get_rank())
    total = np.zeros(1)
    r2 = comm.Iallreduce(np.array([float(k + comm.Get_rank())]), total, op=MPI.SUM)
    MPI.Request.Waitall([req, r2])
    s = sub.allreduce(1) + dup.allreduce(1) + total[0]
    sub.Free()
    dup.Free()
    with rt.update():
        x[:] = x * 0.5 + s


rt.run(step, 60)
print(json.dumps({"event": "final", "rank": comm.Get_rank(), "x": float(x.sum()), "recoveries": len(rt.history)}),
      flush=True)
rt.close()
