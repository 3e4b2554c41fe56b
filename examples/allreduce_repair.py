"""Loop an Allreduce; when a rank dies, repair the communicator and carry on with the survivors.

    dpmpi-run -n 4 -- python examples/allreduce_repair.py
    DPMPI_FAULTS=2:Allreduce@500:KILL dpmpi-run -n 4 -- python examples/allreduce_repair.py

Each rank contributes (its world rank + 1); every sum is checked against the ranks alive at that
moment. With ``--events`` every rank prints one JSON line per event (the demo and the stress
benchmark read them); otherwise rank 0 prints a short account.
"""
import argparse
import array
import json
import sys
import time

import dpmpi
from mpi4py import MPI

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--iters", type=int, default=1000, help="iterations to complete (default 1000)")
parser.add_argument("--events", action="store_true", help="print JSON events from every rank")
args = parser.parse_args()
if args.iters < 1:
    parser.error("--iters must be >= 1")

comm = dpmpi.COMM_WORLD
me = comm.Get_rank()  # world rank: the failed ranks are dropped, the others keep this name


def event(name, **fields):
    if args.events:
        sys.stdout.write(json.dumps({"event": name, "rank": me, "time": time.time(), **fields}) + "\n")
        sys.stdout.flush()


def say(text):
    if not args.events and comm.Get_rank() == 0:
        print(text, flush=True)


alive = list(range(comm.Get_size()))
mine = array.array("d", [me + 1.0])
total = array.array("d", [0.0])
wrong = 0
i = 0
event("start", size=comm.Get_size())
say(f"{comm.Get_size()} ranks, {args.iters} Allreduce iterations")
while i < args.iters:
    try:
        comm.Allreduce(mine, total)
        wrong += total[0] != sum(r + 1 for r in alive)
        i += 1
    except (dpmpi.ProcFailedError, dpmpi.RevokedError) as exc:
        t0 = time.time()
        event("detected", iteration=i, error=type(exc).__name__, error_class=exc.Get_error_class())
        comm.Revoke()  # make sure every survivor leaves the failed operation
        t1 = time.time()
        shrunk = comm.Shrink()  # a communicator of the survivors
        t2 = time.time()
        event("shrunk", size=shrunk.Get_size())
        shrunk.Agree(1)  # every survivor holds the new communicator
        t3 = time.time()
        event("agreed")
        if comm != MPI.COMM_WORLD:
            comm.Free()  # the failed communicator (COMM_WORLD itself cannot be freed)
        comm = shrunk
        alive = comm.allgather(me)
        # survivors can be one iteration apart when the failure hit: resume from the earliest
        i = comm.allreduce(i, op=MPI.MIN)
        event("resumed", iteration=i, alive=alive)
        say(
            f"iteration {i}: a rank failed ({type(exc).__name__}); revoke {1e3 * (t1 - t0):.2f} ms, "
            f"shrink {1e3 * (t2 - t1):.2f} ms, agree {1e3 * (t3 - t2):.2f} ms; continuing on ranks {alive}"
        )
wrong = comm.allreduce(wrong)
event("done", iterations=i, size=comm.Get_size(), wrong_sums=wrong, last_sum=total[0])
say(f"done: {i} iterations, {comm.Get_size()} ranks at the end, {wrong} wrong sums")
sys.exit(1 if wrong else 0)
