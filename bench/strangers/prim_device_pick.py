"""A stranger's program (written from the README only): dpmpi's primitives, no Runtime. Its setup
picks a "device" the usual way, from the rank on the node (a Split_type(COMM_TYPE_SHARED) freed
at once), makes a private Dup, looks at it and frees it, and broadcasts the initial weights; the
loop Allreduces a gradient and commits every 2 steps, repairing with Respawn + restore as the
README shows. Before the thirty-ninth session its replacement's Split_type hung the job (the
survivors had freed theirs, and the repair had forgotten it). Prints the ranks' digests on rank 0.
    ACTIVE=1 bench/strangers/loop.sh prim_device_pick.py 3000 10"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
node = comm.Split_type(MPI.COMM_TYPE_SHARED, key=r)
device = node.Get_rank() % 4  # (a GPU per rank of the node)
node.Free()
private = comm.Dup()
assert private.Get_size() == n  # (a collective there would be refused on a replacement: docs/spares.md)
private.Free()
w = np.zeros(20_000)
if r == 0:
    w[:] = np.linspace(-1.0, 1.0, w.size)
comm.Bcast(w, root=0)
m = np.zeros_like(w)
snap = dpmpi.Snapshot(comm, {"w": w, "m": m}, replicas=1)


# what to do next: "start" (commit epoch 0), "step", "repair" (Respawn, then restore), "restore"
phase = "restore" if comm.role is dpmpi.Role.RECOVERED else "start"
k = 0
while k < steps or phase != "step":
    try:
        if phase == "repair":
            comm.Respawn()
            phase = "restore"
        if phase in ("start", "restore"):
            if phase == "start":
                snap.stage()
                snap.commit(0)
            else:
                k = snap.restore()
            phase = "step"
            continue
        g = np.sin(w * (k + 1) + device + r) * 1e-3
        comm.Allreduce(MPI.IN_PLACE, g)
        m[:] = 0.9 * m + g
        w -= 0.1 * m
        k += 1
        if k % 2 == 0:
            snap.stage()
            snap.commit(k)
    except (dpmpi.ProcFailedError, dpmpi.RevokedError):
        phase = "repair"
d = comm.gather(hashlib.sha256(w.tobytes() + m.tobytes()).hexdigest()[:16], root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": comm.repairs}), flush=True)
snap.close()
