"""A token ring with Isend/Irecv and dpmpi.Request.Waitall inside dpmpi.Runtime (the README's
API only). A peer's death in Waitall (MPI_ERR_IN_STATUS) must be a ProcFailedError that the
runtime recovers from; it was a plain DpmpiError that ended the job (3 of 10 runs with a rank
killed from outside). Prints one JSON line per rank: its final sums."""
import json

import numpy as np
from mpi4py import MPI

import dpmpi

comm = dpmpi.init()
state = {"acc": np.zeros(256), "hops": np.zeros(1, dtype=np.int64)}
rt = dpmpi.Runtime(comm, state)


def step(k):
    dpmpi.faults.point("step")
    r, n = comm.Get_rank(), comm.Get_size()
    token, got = np.full(256, float(k + r)), np.empty(256)
    dpmpi.Request.Waitall([comm.Isend(token, dest=(r + 1) % n, tag=k), comm.Irecv(got, source=(r - 1) % n, tag=k)])
    total = np.empty(256)
    comm.Allreduce(got, total, op=MPI.SUM)
    with rt.update():
        state["acc"] += total * 1e-3
        state["hops"] += 1


rt.run(step, 60)
print(json.dumps({"event": "final", "rank": comm.Get_rank(), "acc": float(state["acc"].sum()),
                  "hops": int(state["hops"][0]), "recoveries": len(rt.history)}), flush=True)
rt.close()
