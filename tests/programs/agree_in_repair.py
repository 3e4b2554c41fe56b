"""A rank begins a repair (``Respawn``, no process dies) while the others wait for it in an
``Agree`` on the active communicator: they must leave the ``Agree`` with ``RevokedError`` and
join the repair (before, both sides waited for each other until the repair deadline). Then the
repaired communicator agrees as usual. One JSON line per rank.

    dpmpi-run -n N -- python agree_in_repair.py
"""
import json

import dpmpi

comm = dpmpi.init()
rank = comm.Get_rank()
caught = None
if rank == 1:
    comm.Barrier()
    comm.Respawn()  # the others cannot complete their Agree without this rank
else:
    try:
        # (inside the try: rank 1 can leave the Barrier and revoke before another rank has left it)
        comm.Barrier()
        comm.Agree(1)
    except (dpmpi.ProcFailedError, dpmpi.RevokedError) as exc:
        caught = type(exc).__name__
        comm.Respawn()
print(json.dumps({"event": "done", "rank": rank, "caught": caught, "agreed": comm.Agree(1),
                  "size": comm.Get_size(), "repairs": len(comm.history)}), flush=True)
