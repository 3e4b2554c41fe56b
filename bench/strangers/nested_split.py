"""A stranger's program: the job split by parity, then each half split again with keys that
reverse the order (``half.Split(color, key)``: a split of a derived communicator, made before the
loop), allreduces on all three every step. Before the twenty-sixth session a replacement of one
half was handed the other half's record of the second split and died with a ``KeyError``; the
job went on shrunk with another result and exit code 0. Prints the digests on rank 0.
    bench/strangers/loop.sh nested_split.py 3000 20"""
import hashlib, json, sys
import dpmpi
import numpy as np
from mpi4py import MPI
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
half = comm.Split(r % 2, r)
sub = half.Split(r // 2, n - r)      # a split of a split, keys per rank
x = np.zeros(16)
rt = dpmpi.Runtime(comm, {"x": x})
def step(k):
    a = np.array([x[0] + r + k])
    half.Allreduce(MPI.IN_PLACE, a)
    b = np.array([x[1] + sub.Get_rank()])
    sub.Allreduce(MPI.IN_PLACE, b)
    c = comm.allreduce(float(a[0] + b[0]))
    with rt.update():
        x[...] = np.tanh(x + 1e-3 * c + 1e-4 * np.arange(16))
rt.run(step, steps)
h = hashlib.sha256(x.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
