"""A message that a matched probe took and the step never received, because a peer's death cut
the step short: its sender must not wait for ever. Rank 1 sends rank 0 a message too large to go
eagerly and waits for the send; rank 0 matches it (``Mprobe``) and, in the step given as the
argument, first waits for a message from rank 2, whose death (``2:step@K:KILL``) raises there.
The repair receives the unreceived message into scratch memory (dpmpi.message): before, rank 1
waited in its ``Wait`` while the others waited for it in the repair's ``Shrink``, until the
repair deadline. Prints one JSON line per rank: its final state's sum."""
import json
import sys

import numpy as np
from mpi4py import MPI

import dpmpi

fail_step = int(sys.argv[1]) if len(sys.argv) > 1 else -1
comm = dpmpi.init()
big = 1 << 16  # doubles: 512 KiB, sent by rendezvous over shared memory
x = np.zeros(8)
rt = dpmpi.Runtime(comm, {"x": x}, interrupt=False)  # (the death surfaces in rank 0's Recv from rank 2)
waited = False


def step(k):
    global waited
    dpmpi.faults.point("step")
    r = comm.Get_rank()
    got = 0.0
    if r == 1:
        comm.Isend(np.full(big, float(k)), dest=0, tag=k).Wait()
    if r == 0:
        msg = comm.Mprobe(source=1, tag=k)
        if k == fail_step and not waited:
            waited = True
            comm.Recv(bytearray(1), source=2, tag=99)  # (never sent: raises once rank 2 is dead)
        buf = np.empty(big)
        msg.Recv(buf)
        got = float(buf[0])
    total = comm.allreduce(got + r)
    with rt.update():
        x[:] = x * 0.5 + total


rt.run(step, 12)
print(json.dumps({"event": "final", "rank": comm.Get_rank(), "sum": float(x.sum()), "recoveries": len(rt.history)}),
      flush=True)
rt.close()
