"""A crash inside MPI_Finalize, made deterministic: an attribute on MPI_COMM_SELF whose delete
callback is libc's abort(). MPI_Finalize deletes COMM_SELF's attributes first, so the process
that sets it (rank 1) gets SIGABRT inside MPI_Finalize, at its normal exit. With DPMPI_FAULTS
2:step@5:KILL rank 2 dies and a spare replaces it, so the job's end is agreed with a failure
known. Rank 0 prints the ranks' digests."""
import ctypes
import hashlib
import json

import dpmpi
import numpy as np
from mpi4py import MPI

comm = dpmpi.init()
r = comm.Get_rank()
x = np.full(8, float(r))
rt = dpmpi.Runtime(comm, {"x": x})


def step(k):
    s = np.array([x.sum()])
    comm.Allreduce(MPI.IN_PLACE, s, MPI.SUM)
    with rt.update():
        x[:] = 0.5 * x + 1e-3 * s[0] + k


rt.run(step, 12)
d = comm.gather(hashlib.sha256(x.tobytes()).hexdigest()[:16], root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
if r == 1:
    lib, libc = ctypes.CDLL("libmpi.so.40", mode=ctypes.RTLD_GLOBAL), ctypes.CDLL(None)
    keyval = ctypes.c_int()
    copy_fn = ctypes.cast(lib.OMPI_C_MPI_COMM_NULL_COPY_FN, ctypes.c_void_p)
    abort_fn = ctypes.cast(libc.abort, ctypes.c_void_p)
    assert lib.MPI_Comm_create_keyval(copy_fn, abort_fn, ctypes.byref(keyval), None) == 0
    assert lib.MPI_Comm_set_attr(ctypes.c_void_p(MPI._handleof(MPI.COMM_SELF)), keyval, None) == 0
    print(json.dumps({"event": "armed", "rank": r}), flush=True)
