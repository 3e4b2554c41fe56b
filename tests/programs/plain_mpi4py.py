"""A plain mpi4py program that never imports dpmpi: it repairs with mpi4py's own ULFM calls."""
import json
import time

from mpi4py import MPI

w = MPI.COMM_WORLD
rank = w.Get_rank()
try:
    while True:
        w.Barrier()
except MPI.Exception as exc:
    w.Revoke()
    s = w.Shrink()
    s.Allreduce(MPI.IN_PLACE, [bytearray(4), MPI.INT])
    print(json.dumps({"event": "shrunk", "rank": rank, "size": s.Get_size(),
                      "error_class": exc.Get_error_class(), "time": time.time()}), flush=True)
