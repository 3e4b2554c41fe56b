"""dpmpi_repl_abandon_all (what the failure watcher calls when a peer's process ends, before it
tells Open MPI): a replication job that waits for a peer gives up at its next step with the
"abandoned" class, and its requests are never tested again. Rank 0 starts a job that receives
from rank 1, which never sends. Prints one JSON line per rank."""
import json

from mpi4py import MPI

import dpmpi
from dpmpi.snapshot.native import Codes, Slot, cext
from dpmpi.snapshot.replicator import Replicator, bind_mpi

comm = dpmpi.init()
world = MPI.COMM_WORLD
bind_mpi()
scomm = world.Dup()
rank = world.Get_rank()
out = {"event": "done", "rank": rank}
if rank == 0:
    slot = Slot(1 << 20, False)
    _hdr, tag = Codes.tags()
    repl = Replicator()
    repl.start(scomm, [(1, tag, 0, slot.ptr, slot.nbytes)], [None], barrier=True)
    out["running_before"] = repl.wait(0.2)  # 1: still running (nothing was sent)
    cext().lib.dpmpi_repl_abandon_all()
    out["rc"] = repl.wait(5.0)
    out["abandoned"] = -Codes.abandoned()
world.Barrier()
print(json.dumps(out), flush=True)
