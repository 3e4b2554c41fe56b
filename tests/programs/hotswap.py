"""Hot-swap test program: active ranks loop an Allreduce of rank-dependent values; on a failure
they call Respawn(); a spare takes the dead rank's place. One JSON line per event on stdout."""
import argparse
import array
import json
import os
import time

import dpmpi
from dpmpi import Role
from mpi4py import MPI

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=200)
parser.add_argument("--split", action="store_true", help="also Allreduce on a communicator split by parity")
parser.add_argument("--warm", action="store_true", help="dpmpi.init(wait=False): spares prepare, then Await()")
args = parser.parse_args()

comm = dpmpi.init(wait=not args.warm)
wid = comm.process_id  # the world rank, or the id a respawn gave this process
if comm.role is Role.SPARE:
    try:
        comm.Get_rank()
    except RuntimeError as exc:
        print(json.dumps({"event": "spare-waiting", "wid": wid, "active_size": comm.active_size, "error": str(exc)}),
              flush=True)
    comm.Await()


def log(event, **fields):
    print(json.dumps({"event": event, "wid": wid, "rank": comm.Get_rank(), "time": time.time(),
                      "cpus": sorted(os.sched_getaffinity(0)), **fields}), flush=True)


log("active", role=comm.role.value, size=comm.Get_size(), epoch=comm.repairs)
comm.on_repair(lambda ev: log("on-repair", epoch=ev.repair, failed=ev.failed, role=ev.role))


class Listener:
    """A layer with its own state (the repair listener contract): logs what it is told."""

    def repair_begins(self):
        log("listener-begins", repairs=comm.repairs)  # before the repair: the old count

    def repair_done(self, ev):
        log("listener-done", repair=ev.repair, renumber={str(k): v for k, v in ev.renumber.items()})


listener = Listener()
comm.add_repair_listener(listener)
half = comm.Split(comm.Get_rank() % 2, comm.Get_rank()) if args.split else None
i = 0
sums = []
while True:
    try:
        # where to (re)start: survivors can be one iteration apart; a replacement knows nothing
        i = comm.allreduce(i if comm.role is not Role.RECOVERED or sums else args.iters, op=MPI.MIN)
        while i < args.iters:
            dpmpi.faults.point("iteration")
            mine = array.array("d", [float((comm.Get_rank() + 1) * (i + 1))])
            total = array.array("d", [0.0])
            comm.Allreduce(mine, total)
            n = comm.Get_size()
            if total[0] != (i + 1) * n * (n + 1) / 2:
                log("wrong-sum", iteration=i, got=total[0])
            if half is not None:
                h = half.allreduce(comm.Get_rank())
                want = sum(r for r in range(n) if r % 2 == comm.Get_rank() % 2)
                if h != want:
                    log("wrong-split", iteration=i, got=h, want=want)
            sums.append(total[0])
            i += 1
        break
    except (dpmpi.ProcFailedError, dpmpi.RevokedError) as exc:
        log("caught", iteration=i, error=type(exc).__name__)
        comm.Respawn()
        ev = comm.history[-1]
        log("respawned", role=comm.role.value, size=comm.Get_size(), epoch=comm.repairs, failed=ev.failed,
            filled=ev.filled, total_ms=ev.total_ms, attempts=ev.attempts)
log("done", role=comm.role.value, size=comm.Get_size(), epoch=comm.repairs, iterations=i, last_sum=sums[-1] if sums else None)
