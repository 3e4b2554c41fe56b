"""A dpmpi program that spawns a plain mpi4py child (issue 10): ``spawn_plain.py [child]``.
The parent uses dpmpi.Comm (Spawn, then Merge of the intercommunicator), the child plain mpi4py.
dpmpi must not add a warm-up collective the child does not make (it would hang), and Spawn must
find room even when the job fills the cores. One JSON line per process."""
import json
import sys

if sys.argv[1:] == ["child"]:
    from mpi4py import MPI

    parent = MPI.Comm.Get_parent()
    merged = parent.Merge(high=True)
    side = "child"
else:
    import dpmpi
    from mpi4py import MPI

    parent = dpmpi.COMM_WORLD.Spawn(sys.executable, args=[__file__, "child"], maxprocs=1)
    merged = parent.Merge(high=False)
    side = "parent"
total = merged.allreduce(merged.Get_rank())
print(json.dumps({"side": side, "rank": merged.Get_rank(), "size": merged.Get_size(), "total": total,
                  "inter": type(parent).__name__}), flush=True)
merged.Free()
parent.Disconnect()
