"""Fault-test program: loop one kind of communication; when a peer fails, repair the
communicator (Revoke, Shrink, Agree) and finish with an Allreduce on the shrunk one; a failure
there (a second death that the shrink did not yet know of) shrinks the shrunk one again.

Every rank prints one JSON object per event on stdout (``start``, ``caught``, ``repaired``,
``finished``) so that tests judge from structured output. Launched by the tests through
dpmpi-run with a DPMPI_FAULTS plan.
"""
import argparse
import array
import json
import time

import dpmpi
from mpi4py import MPI

parser = argparse.ArgumentParser()
parser.add_argument("--op", default="allreduce", choices=["allreduce", "allreduce-obj", "barrier", "recv-victim", "recv-any", "halo"])
parser.add_argument("--victim", type=int, default=2, help="for recv-victim: the rank the others receive from")
parser.add_argument("--iters", type=int, default=1_000_000)
parser.add_argument("--no-repair", action="store_true", help="let the failure escape (job must fail)")
parser.add_argument("--pause", default="", metavar="RANK:ITER:SECONDS:HOW",
                    help="that rank pauses before iteration ITER: HOW=sleep (time.sleep) or spin (holds the GIL)")
args = parser.parse_args()

comm = dpmpi.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()


def log(event, **fields):
    print(json.dumps({"event": event, "rank": rank, "time": time.time(), **fields}), flush=True)


one = array.array("d", [1.0])
out = array.array("d", [0.0])
msg = array.array("d", [0.0])


def step(i):
    if args.op == "allreduce":
        comm.Allreduce(one, out)
    elif args.op == "allreduce-obj":  # a pickled reduction (mpi4py's lower-case API)
        assert comm.allreduce(1) == size
    elif args.op == "barrier":
        comm.Barrier()
    elif args.op == "halo":  # an open chain, as in a stencil's halo exchange: the ends use PROC_NULL
        up = rank - 1 if rank > 0 else MPI.PROC_NULL
        down = rank + 1 if rank < size - 1 else MPI.PROC_NULL
        comm.Sendrecv(one, dest=up, sendtag=1, recvbuf=msg, source=down, recvtag=1)
        comm.Sendrecv(one, dest=down, sendtag=2, recvbuf=msg, source=up, recvtag=2)
    elif args.op == "recv-victim":
        if rank == args.victim:
            for dst in range(size):
                if dst != rank:
                    comm.Send(msg, dest=dst, tag=7)
        else:
            comm.Recv(msg, source=args.victim, tag=7)
    elif args.op == "recv-any":
        comm.Send(msg, dest=(rank + 1) % size, tag=8)
        comm.Recv(msg, source=MPI.ANY_SOURCE, tag=8)


pause_rank, pause_at, pause_s, pause_how = args.pause.split(":") if args.pause else (-1, -1, 0, "")


def pause():
    log("pause", seconds=float(pause_s), how=pause_how)
    if pause_how == "sleep":
        time.sleep(float(pause_s))
    else:
        end = time.monotonic() + float(pause_s)
        while time.monotonic() < end:
            pass
    log("resume")


log("start", size=size, op=args.op)
for i in range(args.iters):
    try:
        if rank == int(pause_rank) and i == int(pause_at):
            pause()
        step(i)
    except (dpmpi.ProcFailedError, dpmpi.RevokedError) as exc:
        log("caught", iteration=i, error=type(exc).__name__, error_class=exc.Get_error_class(), failed=list(exc.failed_ranks))
        if args.no_repair:
            raise
        # ULFM's pattern: a peer can die so close to the first that the shrink still holds it
        # (the agreement inside Shrink had not learnt of it); the survivors then fail again on
        # the shrunk communicator and shrink that one (CI, 1 run: rank 1 of two killed together)
        mine = array.array("d", [float(rank + 1)])
        total = array.array("d", [0.0])
        broken = comm
        while True:
            broken.Revoke()
            shrunk = broken.Shrink()
            log("shrunk", size=shrunk.Get_size())
            try:
                flag = shrunk.Agree(1)
                shrunk.Allreduce(mine, total)
                break
            except (dpmpi.ProcFailedError, dpmpi.RevokedError) as again:
                log("failed-again", error=type(again).__name__, size=shrunk.Get_size())
                broken = shrunk
        log("repaired", size=shrunk.Get_size(), agreed=flag, sum=total[0])
        break
else:
    log("no-failure", iterations=args.iters)
dpmpi.faults.point("finish")
log("finished")
