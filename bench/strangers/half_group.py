"""A stranger's program: the job split by parity, then, from each half, the half again from its
group (``Create``), its first rank alone (``Create_group``) and a periodic ring over it
(``Create_cart``), all made before the loop; allreduces on each every step. Before the
twenty-sixth session a replacement in one half rebuilt them with the other half's members
(``MPI_ERR_COMM``; two more ranks failed and the job ended with 2 ranks and another result).
Prints the digests on rank 0.
    bench/strangers/loop.sh half_group.py 1500 20"""
import hashlib, json, sys
import dpmpi
import numpy as np
from mpi4py import MPI
steps = int(sys.argv[1])
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
half = comm.Split(r % 2, r)
grp = half.Get_group()
whole = half.Create(grp)                 # the whole half, by group
lead = half.Create_group(grp.Incl([0]))  # the half's first rank alone
grp.Free()
cart = half.Create_cart([half.Get_size()], periods=[True])
x = np.zeros(8)
rt = dpmpi.Runtime(comm, {"x": x})
def step(k):
    a = whole.allreduce(float(x[0] + r))
    b = lead.allreduce(float(x[1] + r)) if lead != MPI.COMM_NULL else 0.0
    c = cart.allreduce(float(x[2] + r * r))
    with rt.update():
        x[...] = np.tanh(x + 1e-3 * (a + b + c + comm.allreduce(r)) + 1e-4 * np.arange(8))
rt.run(step, steps)
h = hashlib.sha256(x.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
