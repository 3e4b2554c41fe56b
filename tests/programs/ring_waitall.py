"""A token ring with Isend/Irecv and dpmpi.Request.Waitall inside dpmpi.Runtime (the README's
API only). A peer's death in Waitall (MPI_ERR_IN_STATUS) must be a ProcFailedError that the
runtime recovers from; it was a plain DpmpiError that ended the job (3 of 10 runs with a rank
killed from outside). Prints one JSON line per rank: its final sums.

Arguments: ``mpi4py`` completes the requests with mpi4py's own ``MPI.Request.Waitall`` (as a
program written for mpi4py does: its errors are mpi4py's, which the runtime must still take for
the peer's death), ``nointerrupt`` runs without the failure watcher's interruption (the failure
then always surfaces in the Waitall)."""
import json
import sys

import numpy as np
from mpi4py import MPI

import dpmpi

comm = dpmpi.init()
state = {"acc": np.zeros(256), "hops": np.zeros(1, dtype=np.int64)}
rt = dpmpi.Runtime(comm, state, interrupt="nointerrupt" not in sys.argv)
waitall = MPI.Request.Waitall if "mpi4py" in sys.argv else dpmpi.Request.Waitall


def step(k):
    dpmpi.faults.point("step")
    r, n = comm.Get_rank(), comm.Get_size()
    token, got = np.full(256, float(k + r)), np.empty(256)
    waitall([comm.Isend(token, dest=(r + 1) % n, tag=k), comm.Irecv(got, source=(r - 1) % n, tag=k)])
    total = np.empty(256)
    comm.Allreduce(got, total, op=MPI.SUM)
    with rt.update():
        state["acc"] += total * 1e-3
        state["hops"] += 1


rt.run(step, 60)
print(json.dumps({"event": "final", "rank": comm.Get_rank(), "acc": float(state["acc"].sum()),
                  "hops": int(state["hops"][0]), "recoveries": len(rt.history)}), flush=True)
rt.close()
