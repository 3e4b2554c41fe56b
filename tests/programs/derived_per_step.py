"""Derived communicators made in every step and freed at its end (as bench/strangers/
split_per_step.py, found hanging in the twelfth session), beside one made before the loop (ranks 0
and 2 only: the others get COMM_NULL) and one made lazily at step 2 and kept. Fault point "split"
(after the step's Split, before its first use). 4 active ranks.

    derived_per_step.py runtime N   dpmpi.Runtime; prints each rank's state after N steps
    derived_per_step.py closure N   the same, the step's Split used inside a function of the step's
                                    own (a closure that holds it)
    derived_per_step.py loop N      the program's own loop (try / Respawn); prints the last step's
                                    values
    derived_per_step.py inline N    the same with the step's Split in the loop itself, freed in the
                                    except clause before Respawn (docs/spares.md)

Every value is an integer sum whose failure-free result the test computes in closed form; each
rank also prints how many derived communicators dpmpi still tracks (``comm.derived_tracked``)."""
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

mode, n = sys.argv[1], int(sys.argv[2])
comm = dpmpi.init()
r = comm.Get_rank()
evens = comm.Split(0 if r % 2 == 0 else MPI.UNDEFINED, r)
kept = {}


def step(k):
    sub = comm.Split(r % 2, r)
    dpmpi.faults.point("split")
    if mode == "closure":  # the use inside a function of the step's own, whose closure holds sub

        def pair_sum(v):
            return sub.allreduce(v)
        s = pair_sum(r + k)
    else:
        s = sub.allreduce(r + k)  # (the two ranks of r's parity)
    sub.Free()
    e = evens.allreduce(k) if evens else 0
    if k >= 2 and "dup" not in kept:
        kept["dup"] = comm.Dup()
    d = kept["dup"].allreduce(1) if "dup" in kept else 0
    return s, e, d


if mode in ("runtime", "closure"):
    x = np.zeros(3, dtype=np.int64)
    rt = dpmpi.Runtime(comm, {"x": x})

    def runtime_step(k):
        s, e, d = step(k)
        with rt.update():
            x[:] += (s, e, d)

    rt.run(runtime_step, n)
    print(json.dumps({"event": "done", "rank": comm.Get_rank(), "x": x.tolist(), "recoveries": len(rt.history),
                      "role": comm.role.value, "tracked": comm.derived_tracked}), flush=True)
else:
    k = comm.allreduce(-1, op=MPI.MAX) if comm.role is dpmpi.Role.RECOVERED else 0
    last = None
    while k < n:
        sub = None
        try:
            if mode == "inline":  # step() written out here, its Split held by this frame
                sub = comm.Split(r % 2, r)
                dpmpi.faults.point("split")
                s = sub.allreduce(r + k)
                sub.Free()
                e = evens.allreduce(k) if evens else 0
                if k >= 2 and "dup" not in kept:
                    kept["dup"] = comm.Dup()
                last = s, e, kept["dup"].allreduce(1) if "dup" in kept else 0
            else:
                last = step(k)
            k += 1
        except (dpmpi.ProcFailedError, dpmpi.RevokedError):
            if sub:
                sub.Free()  # (before Respawn: a communicator still held would be remade for the replacement)
            sub = None
            comm.Respawn()
            k = comm.allreduce(k, op=MPI.MAX)  # (the replacement's first call, above)
    print(json.dumps({"event": "done", "rank": comm.Get_rank(), "last": list(last), "repairs": comm.repairs,
                      "role": comm.role.value, "tracked": comm.derived_tracked}), flush=True)
