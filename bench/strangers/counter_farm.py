"""A stranger's program: dynamic load balancing with mpi4py's own shared counter
(``mpi4py.util.sync.Counter``, an RMA window with ``Fetch_and_op``) over ``comm.mpi``, made in
every step: each rank takes task numbers until they run out, writes each task's result into its
slot, then one ``Allreduce`` gathers them (one writer per slot: the sum is exact). Prints the
digests on rank 0.
    ACTIVE=1 HI=2.5 bench/strangers/loop.sh counter_farm.py 1500 8"""
import hashlib, json, sys
import dpmpi, numpy as np
from mpi4py import MPI
from mpi4py.util.sync import Counter
steps = int(sys.argv[1])
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
T = 64
x = np.random.default_rng(7).random(T)
rt = dpmpi.Runtime(comm, {"x": x})
def step(k):
    counter = Counter(comm=comm.mpi)
    out = np.zeros(T)
    try:
        while (t := next(counter)) < T:
            out[t] = np.tanh(x[t] * (1 + (t + k) % 5)) + 1e-3 * k
    finally:
        counter.free()
    total = np.empty(T)
    comm.Allreduce(out, total, MPI.SUM)
    with rt.update():
        x[:] = 0.5 * x + 0.25 * np.roll(total, 1)
rt.run(step, steps)
h = hashlib.sha256(x.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
