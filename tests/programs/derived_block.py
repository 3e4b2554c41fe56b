"""A repair must wake a rank blocked in a collective on a derived communicator that the dead
process is not part of. Ranks 0 and 2 share the even half of a Split; rank 3 dies; rank 2 learns
of it in a Barrier on the whole communicator and repairs, while rank 0 waits in a Barrier on the
even half for rank 2. Without the repair revoking the derived communicators, rank 0 waited there
until the repair deadline. Prints one JSON line per active rank."""
import json

import dpmpi

comm = dpmpi.init()
even = comm.Split(comm.Get_rank() % 2, comm.Get_rank())  # (a replacement gets the rebuilt one)
caught = None
if comm.role is not dpmpi.Role.RECOVERED:
    comm.Barrier()
    dpmpi.faults.point("die")
    try:
        if comm.Get_rank() == 0:
            even.Barrier()  # rank 2 leaves for the repair instead
        else:
            comm.Barrier()  # ends with the death of rank 3
    except (dpmpi.ProcFailedError, dpmpi.RevokedError) as exc:
        caught = type(exc).__name__
        comm.Respawn()
rank = comm.Get_rank()
total = comm.allreduce(1)
half = even.allreduce(rank)
print(json.dumps({"event": "done", "rank": rank, "role": comm.role.value, "caught": caught, "total": total,
                  "half": half}), flush=True)
