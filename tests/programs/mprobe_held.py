"""A message that a matched probe took and the step never received, because a peer's death cut
the step short: its sender must not wait for ever. Rank 1 sends rank 0 a message too large to go
eagerly and waits for the send; in the step given as the argument rank 0 matches it
(``Mprobe``), then tells rank 2, which reaches fault point ``matched`` (``2:matched@1:KILL``: it
dies there), and waits for a message from rank 2 that never comes: the death raises there (or at
the call's entry, once the failure watcher noticed it). The repair receives the unreceived
message into scratch memory (dpmpi.message): before, rank 1 waited in its ``Wait`` while the
others waited for it in the repair's ``Shrink``, until the repair deadline. Before the forty-ninth
session rank 2 died at the step's start (``2:step@5``), and when rank 0 noticed that before its
``Recv`` (a failure raised at an earlier call), the redone step waited in that ``Recv`` for the
replacement for ever: 3 hangs in 66 jobs run two at a time, 1 in 7 fresh ``make test`` runs.
Prints one JSON line per rank: its final state's sum."""
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
    if r == 2 and k == fail_step and comm.role is not dpmpi.Role.RECOVERED:
        comm.Recv(bytearray(1), source=0, tag=98)  # (rank 0 has matched rank 1's message)
        dpmpi.faults.point("matched")  # (the test's fault plan kills this rank here)
    if r == 0:
        msg = comm.Mprobe(source=1, tag=k)
        if k == fail_step and not waited:
            waited = True  # (the redone step goes on: the replacement sends nothing)
            comm.Send(bytearray(1), dest=2, tag=98)
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
