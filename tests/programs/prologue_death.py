"""A Runtime made before the program's prologue (its collectives before the first run): a death
there is repaired where it happens, the replacement answers the prologue's earlier calls from the
survivors' record and makes the interrupted one with them. ``--runtime-last``: the Runtime is made
after the prologue (dpmpi.init's watch of the setup repairs it instead: dpmpi.resilient.setup). Marks point "load" before each
collective of the prologue (DPMPI_FAULTS=2:load@1:KILL) and before its Split, and dpmpi marks
point "created" after each communicator it makes there (before their agreement). Prints a line
"final" per rank: its digest, recoveries and role."""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
last = "--runtime-last" in sys.argv
comm = dpmpi.init()
r = comm.Get_rank()
w = np.zeros(4096)
m = np.zeros(4096)
rt = None if last else dpmpi.Runtime(comm, {"w": w, "m": m})  # first: the prologue below is covered
if r == 0:
    w[...] = np.random.default_rng(1).standard_normal(w.size)  # "loaded" by rank 0 only
dpmpi.faults.point("load")
comm.Bcast(w, root=0)                            # the initial weights
dpmpi.faults.point("load")
scale = comm.allreduce(r + 1, op=MPI.SUM)        # e.g. a data set's total size
dpmpi.faults.point("load")
cfg = comm.bcast({"lr": 0.01 / scale} if r == 0 else None, root=0)
dpmpi.faults.point("load")
seen = np.zeros(4096)
comm.Allreduce(w, seen, op=MPI.SUM)              # a check every rank computes
assert np.array_equal(seen, comm.Get_size() * w), "the ranks' initial weights differ"
dpmpi.faults.point("load")
pair = comm.Split(r // 2, r)                     # the grid's rows (a death before it, or, at point
dup = comm.Dup()                                 # "created", after it: the others in its agreement)
node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=r)  # how many ranks share this node; then freed
nlocal = node.Get_size()
node.Free()
rt = rt or dpmpi.Runtime(comm, {"w": w, "m": m})


def step(k):
    g = np.sin(w * (k + 1 + r))
    comm.Allreduce(MPI.IN_PLACE, g, op=MPI.SUM)
    h = np.cos(m[:64] + r)
    pair.Allreduce(MPI.IN_PLACE, h, op=MPI.SUM)
    g[:64] += dup.allreduce(float(h.sum()), op=MPI.SUM) * h
    with rt.update():
        m[...] = 0.9 * m + g
        w[...] -= cfg["lr"] * m


rt.run(step, steps)
digest = hashlib.sha256(w.tobytes() + m.tobytes()).hexdigest()[:16]
print(json.dumps({"event": "final", "rank": r, "digest": digest, "recoveries": len(rt.history), "repairs": comm.repairs,
                  "role": comm.role.value, "size": comm.Get_size(), "nlocal": nlocal}), flush=True)
