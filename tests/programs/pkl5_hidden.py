"""mpi4py.util.pkl5's collectives run on a Dup of the communicator that mpi4py makes and caches
(``MPI._commctx_intra``), which dpmpi did not revoke: here rank 1 first waits for rank 2's
message (rank 2 is killed at a step's start by the test's fault plan), so ranks 0 and 3 sit in
the pkl5 ``allgather``'s ``MPI_Probe`` for rank 1's part on that hidden communicator; before
the twenty-second session they waited there forever while the others repaired. Prints each
rank's state after N steps (failure-free: x == 6 N + 2 N (N - 1) on every rank)."""
import json
import sys

import dpmpi
import numpy as np
from mpi4py.util import pkl5

steps = int(sys.argv[1])
comm = dpmpi.init()
r = comm.Get_rank()
x = np.zeros(2, dtype=np.int64)
rt = dpmpi.Runtime(comm, {"x": x})


def step(k):
    pc = pkl5.Intracomm(comm.mpi)  # (made in the step: after a repair, over the new communicator)
    if r == 2:
        comm.send(k, dest=1, tag=4)
    elif r == 1:
        assert comm.recv(source=2, tag=4) == k
    parts = pc.allgather(r + k)
    with rt.update():
        x[:] += sum(parts)


rt.run(step, steps)
print(json.dumps({"event": "done", "rank": r, "x": x.tolist(), "recoveries": len(rt.history),
                  "role": comm.role.value}), flush=True)
