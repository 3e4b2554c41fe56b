"""A stranger's program (written from the README only): no snapshots, no Runtime; it repairs by
itself (comm.Respawn() in its own except) and resumes at the survivors' earliest iteration, as a
program whose state is a function of the iteration would. Each iteration Allreduces a
rank-dependent value (``--ring``: after a Sendrecv around the ring, a call a replacement could
not redo, so dpmpi's watch of the setup ends at its first agreement). A death in its first
collectives is repaired by dpmpi's watch of the setup (without --ring), later ones by the
program. Prints a digest of every iteration's sums on rank 0.
    DPMPI_FAULTS=2:allreduce@10:KILL dpmpi-run -n 5 --spares 1 -- python plain_respawn.py 2000 [--ring]"""
import hashlib
import json
import sys

import dpmpi
from mpi4py import MPI

iters = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
ring = "--ring" in sys.argv
comm = dpmpi.init()
sums = {}
i = 0
while True:
    try:
        recovered = comm.role is dpmpi.Role.RECOVERED and not sums
        i = comm.allreduce(iters if recovered else i, op=MPI.MIN)
        while i < iters:
            r, n = comm.Get_rank(), comm.Get_size()
            mine = float((r + 1) * (i + 1))
            if ring:
                mine += comm.sendrecv(r, dest=(r + 1) % n, source=(r - 1) % n) * 1e-3
            sums[i] = comm.allreduce(mine)
            i += 1
        comm.Barrier()
        break
    except (dpmpi.ProcFailedError, dpmpi.RevokedError):
        comm.Respawn()
d = comm.gather(hashlib.sha256(json.dumps(sorted(sums.items())[-100:]).encode()).hexdigest()[:16], root=0)
if comm.Get_rank() == 0:
    print(json.dumps({"digest": d, "recoveries": comm.repairs}), flush=True)
