"""A stranger's program that repairs by itself, as docs/communicators.md shows: no spares, no
dpmpi.init, only dpmpi.COMM_WORLD with ULFM's Revoke and Shrink. Each step passes a token around
the ring (Sendrecv) and adds f(world rank, step) of every member to a running total (Allreduce).
After a failure the survivors shrink and roll back to the last step that every one of them
finished (an allreduce of MIN over their step counts on the shrunk communicator; a failure there
shrinks again). Every path after an error goes through Revoke + Shrink of the communicator in
use: no Agree in the normal path (a rank inside an Agree while another shrinks the same
communicator is a mismatched collective: it hung 1 of 20 runs of this program's first version).
At the end every survivor must hold the same total, equal to what the membership of each step
gives. Prints {"digest": "consistent"|..., "recoveries": shrinks} from the first survivor.
    ACTIVE=1 SPARES=0 bench/strangers/loop.sh self_repair.py 20000 20"""
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

FAIL = (dpmpi.ProcFailedError, dpmpi.RevokedError)
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
comm = dpmpi.COMM_WORLD
me = MPI.COMM_WORLD.Get_rank()
totals = [0.0]  # totals[k]: the running total after k steps
members: list[tuple[int, ...]] = []  # the world ranks of the communicator each step ran on
shrinks = 0


def f(rank: int, step: int) -> float:
    return float((rank + 1) * (step % 7 + 1))


def world_ranks(c) -> tuple[int, ...]:
    group, world = c.Get_group(), MPI.COMM_WORLD.Get_group()
    try:
        return tuple(MPI.Group.Translate_ranks(group, list(range(group.Get_size())), world))
    finally:
        group.Free()
        world.Free()


def recover(c, k: int):
    """Shrink until the survivors agree on the last step all of them finished."""
    global shrinks
    while True:
        c.Revoke()
        c = c.Shrink()
        shrinks += 1
        try:
            return c, c.allreduce(k, op=MPI.MIN)
        except FAIL:
            continue


k = 0
while True:
    try:
        while k < steps:
            n, r = comm.Get_size(), comm.Get_rank()
            got = np.empty(1)
            comm.Sendrecv(np.array([float(k)]), dest=(r + 1) % n, recvbuf=got, source=(r - 1) % n)
            out = np.empty(1)
            comm.Allreduce(np.array([f(me, k)]), out, op=MPI.SUM)
            totals.append(totals[-1] + float(out[0]))
            members.append(world_ranks(comm))
            k += 1
        want = sum(sum(f(w, s) for w in ranks) for s, ranks in enumerate(members))
        everyone = comm.allgather((totals[-1], want, len(members)))  # (a failure here: recovered too)
        break
    except FAIL:
        comm, k = recover(comm, k)
        del totals[k + 1:], members[k:]

consistent = all(t == everyone[0][0] and t == w and m == steps for t, w, m in everyone)
if comm.Get_rank() == 0:
    print(json.dumps({"digest": "consistent" if consistent else f"inconsistent {everyone}", "recoveries": shrinks}),
          flush=True)
