"""A stranger's program: MPI-4's ``Create_from_group`` (a communicator made from a group and a
tag, without a parent communicator) in every step: the even and the odd ranks of ``comm`` each
get their own, reduce on it, then free it. Prints the digests on rank 0.
    ACTIVE=1 HI=2.5 bench/strangers/loop.sh from_group_step.py 1500 8
Forty-ninth session: it hangs without any failure in most runs (20 steps, 4 + 1): Open MPI
5.0.11's Create_from_group waits for ever in ompi_comm_activate while another thread is inside
MPI, and the Runtime's replication thread often is (docs/limitations.md). Not fixed."""
import hashlib, json, sys
import dpmpi, numpy as np
from mpi4py import MPI
steps = int(sys.argv[1])
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
x = np.random.default_rng(r).random(64)
rt = dpmpi.Runtime(comm, {"x": x})
def step(k):
    group = comm.Get_group()
    mine = group.Incl([i for i in range(n) if i % 2 == r % 2])
    group.Free()
    sub = MPI.Intracomm.Create_from_group(mine, f"dpmpi-stranger-{r % 2}")
    mine.Free()
    try:
        s = sub.allreduce(float(x.sum()))
    finally:
        sub.Free()
    t = comm.allreduce(s)
    with rt.update():
        x[:] = np.cos(x + 1e-4 * t) * 0.5 + 0.5
rt.run(step, steps)
h = hashlib.sha256(x.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
