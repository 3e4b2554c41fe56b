"""A stranger's program: MPI-IO made in the step, as limitations.md advises: each step opens a
shared file over ``comm.mpi`` (its name broadcast from rank 0 before the loop), writes this
rank's state with ``Write_at_all``, reads its neighbour's with ``Read_at_all``, closes it.
Prints the digests on rank 0.
    bench/strangers/loop.sh file_step.py 1500 12"""
import hashlib, json, os, sys, tempfile
import dpmpi
import numpy as np
from mpi4py import MPI
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 1500
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
path = comm.bcast(tempfile.mktemp(prefix="dpmpi_file_step_") if r == 0 else None, root=0)
x = np.zeros(8)
rt = dpmpi.Runtime(comm, {"x": x})
def step(k):
    fh = MPI.File.Open(comm.mpi, path, MPI.MODE_CREATE | MPI.MODE_RDWR)
    try:
        fh.Write_at_all(8 * 8 * r, x)
        fh.Sync()
        back = np.empty(8)
        fh.Read_at_all(8 * 8 * ((r + 1) % n), back)
    finally:
        fh.Close()
    with rt.update():
        x[...] = np.tanh(x + 1e-3 * (back.sum() + comm.allreduce(float(x[0]))) + 1e-4 * np.arange(8))
rt.run(step, steps)
h = hashlib.sha256(x.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
    os.unlink(path)
