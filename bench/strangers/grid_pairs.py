"""A stranger's program: a 2 x 4 process grid from two Splits of ``comm`` (rows, columns), each row
split again into pairs (keys reversed), a Dup of the pair, and each column's first rank alone
(``Create_group`` on the column), all made before the loop; two copies of each snapshot
(``replicas=2``, so that both ranks of a pair may die together). Needs 8 active ranks.
    DPMPI_FAULTS=0:step@100:KILL,1:repair@1:KILL dpmpi-run -n 10 --spares 2 -- python grid_pairs.py 600"""
import hashlib, json, sys
import dpmpi
import numpy as np
from mpi4py import MPI
steps = int(sys.argv[1])
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
row = comm.Split(r // 4, r)
col = comm.Split(r % 4, r)
pair = row.Split(row.Get_rank() // 2, -r)
cg = col.Get_group()
top = col.Create_group(cg.Incl([0]))
cg.Free()
twin = pair.Dup()
x = np.zeros(8)
rt = dpmpi.Runtime(comm, {"x": x}, replicas=2)
def step(k):
    a = row.allreduce(float(x[0] + r))
    b = col.allreduce(float(x[1] * r))
    c = pair.allgather(r)[0] + twin.allreduce(r)
    d = top.allreduce(float(x[2])) if top != MPI.COMM_NULL else 0.0
    with rt.update():
        x[...] = np.tanh(x + 1e-3 * (a + b + c + d) + 1e-4 * np.arange(8))
rt.run(step, steps)
h = hashlib.sha256(x.tobytes()).hexdigest()[:16]
dd = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": dd, "recoveries": len(rt.history)}), flush=True)
