"""A replication job that waits for a peer longer than DPMPI_REPL_REPORT must say so on stderr,
once, naming what it waits for. Rank 0 starts a job that receives from rank 1; rank 1 starts its
sending job only after rank 0's job has run for 0.5 s (a bounded wait that drives it and returns
"still running"), then both jobs complete. Prints one JSON line per rank."""
import json

from mpi4py import MPI

import dpmpi
from dpmpi.snapshot.native import Codes, Slot
from dpmpi.snapshot.replicator import Replicator, bind_mpi

comm = dpmpi.init()
world = MPI.COMM_WORLD
bind_mpi()
scomm = world.Dup()
slot = Slot(1 << 20, False)
_hdr, tag = Codes.tags()
repl = Replicator()
rank = world.Get_rank()
running_after = None
if rank == 0:
    repl.start(scomm, [(1, tag, 0, slot.ptr, slot.nbytes, 0)], [None], barrier=True)
    running_after = repl.wait(0.5)  # 1: still running (rank 1 has not started)
    world.Barrier()
else:
    world.Barrier()
    repl.start(scomm, [(0, tag, 1, slot.ptr, slot.nbytes, 0)], [None], barrier=True)
print(json.dumps({"event": "done", "rank": rank, "running_after": running_after, "rc": repl.wait()}), flush=True)
repl.close(1.0)
scomm.Free()
