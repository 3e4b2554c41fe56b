"""A Dup that completes on one rank but whose result another rank loses to the failure's
exception (twenty-fifth session: the rare hang of test_communicators_made_in_every_step_do_not_hang_a_repair).

4 active ranks; ``pair`` = the two ranks of each parity. At step 3 ranks 0 and 3 compute for 1.0
and 1.5 s before their ``pair.Dup()`` (compute stand-ins; they are not armed, so not interrupted,
and rank 3 goes to repair only when its Dup meets rank 1's death). Rank 2 is already waiting in
its Dup, armed (``dpmpi.interrupt_on_failure``), when rank 1 dies (the test's fault, 0.2 s into
the step). Rank 2's watcher notices inside the Dup: the Dup completes when rank 0 arrives and the
failure is raised as it returns, so rank 2 never stores it; rank 0 does. After the repair rank 2
makes the Dup again, rank 0 does not. Each rank prints whether it held the Dup when its failure
reached it, and its sum of every step's values (the same as without a failure)."""
import contextlib
import json
import sys
import time

import dpmpi
from mpi4py import MPI

n = int(sys.argv[1])
comm = dpmpi.init()
r = comm.Get_rank()
pair = comm.Split(r % 2, r)
kept = {}
k = comm.allreduce(-1, op=MPI.MAX) if comm.role is dpmpi.Role.RECOVERED else 0
total = comm.allreduce(0, op=MPI.MAX) if comm.role is dpmpi.Role.RECOVERED else 0  # (the survivors' sum so far)
while k < n:
    try:
        with dpmpi.interrupt_on_failure() if r in (1, 2) else contextlib.nullcontext():
            dpmpi.faults.point("step")
            if k == 3 and r in (0, 3) and "dup" not in kept:
                t = time.monotonic()
                while time.monotonic() - t < (1.0 if r == 0 else 1.5):  # (computing: late to the Dup)
                    pass
            if k >= 3 and "dup" not in kept:
                kept["dup"] = pair.Dup()
            d = kept["dup"].allreduce(1) if "dup" in kept else 0
            s = comm.allreduce(k)
        total += s + d
        k += 1
    except (dpmpi.ProcFailedError, dpmpi.RevokedError):
        print(json.dumps({"event": "failure", "rank": r, "step": k, "held": "dup" in kept}), flush=True)
        comm.Respawn()
        k = comm.allreduce(k, op=MPI.MAX)
        total = comm.allreduce(total, op=MPI.MAX)
print(json.dumps({"event": "done", "rank": r, "total": total, "role": comm.role.value}), flush=True)
