"""Point-to-point messages outside dpmpi.Runtime's runs, which a replacement's receives must get
from its survivors' logs (dpmpi.resilient.prologue_p2p). Before the first run: each rank sends
its boundary value around a ring with ``Sendrecv`` (a status asked for), a pickled dict to the
next rank with ``send``/``recv`` (by tag), a ``Sendrecv_replace`` the other way, rank 0 a
``Send`` to the last rank, ranks 0 and 2 a ``sendrecv``, each pair of a ``comm.Split`` a
``Sendrecv`` on it, ``Irecv``/``Isend`` both ways around the ring (``MPI.Request.Waitall``) and an
``isend`` answered by a ``recv``; between the two runs a ``sendrecv`` of each rank's norm around the
ring. A failure in the runs: the replacement's calls are answered from the logs (and made for
real with a peer replaced in the same repair). Prints a line "final" per rank: its digest,
recoveries and role."""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
nxt, prv = (r + 1) % n, (r - 1) % n
w, x = np.linspace(0.0, 1.0, 256) * (r + 1), np.zeros(256)
halo, status = np.zeros(2), MPI.Status()
comm.Sendrecv(w[-2:].copy(), dest=nxt, sendtag=5, recvbuf=halo, source=prv, recvtag=5, status=status)
assert status.Get_source() == prv and status.Get_tag() == 5 and status.Get_count(MPI.DOUBLE) == 2
if r % 2 == 0:
    comm.send({"from": r, "scale": 0.5 + r}, dest=nxt, tag=7)
    got = comm.recv(source=prv, tag=7)
else:
    got = comm.recv(source=prv, tag=7)
    comm.send({"from": r, "scale": 0.5 + r}, dest=nxt, tag=7)
edge = np.full(3, float(r))
comm.Sendrecv_replace(edge, dest=prv, sendtag=9, source=nxt, recvtag=9)
far = np.zeros(4)
if r == 0:
    comm.Send(np.arange(4.0) + 0.25, dest=n - 1, tag=11)
elif r == n - 1:
    comm.Recv(far, source=0, tag=11)
across = comm.sendrecv(r + 0.5, dest=2 - r, source=2 - r) if r in (0, 2) else 0.0  # (not snapshot buddies)
pair = comm.Split(r // 2, r)  # (a derived communicator: its messages are logged too)
mate = 1 - pair.Get_rank()
inpair = np.zeros(2)
pair.Sendrecv(np.full(2, r + 0.125), dest=mate, sendtag=3, recvbuf=inpair, source=mate, recvtag=3)
lo, hi = np.zeros(2), np.zeros(2)  # (non-blocking, completed by mpi4py's own Waitall)
reqs = [comm.Irecv(lo, source=prv, tag=15), comm.Irecv(hi, source=nxt, tag=16),
        comm.Isend(np.full(2, r * 1.5), dest=nxt, tag=15), comm.Isend(np.full(2, r * 2.5), dest=prv, tag=16)]
MPI.Request.Waitall(reqs)
req = comm.isend({"k": r}, dest=nxt, tag=17)
told = comm.recv(source=prv, tag=17)["k"]
req.wait()
w += 1e-2 * halo.sum() + 1e-3 * got["scale"] + 1e-4 * (edge.sum() + far.sum() + across + inpair.sum())
w += 1e-5 * (lo.sum() + 2 * hi.sum() + told)
rt = dpmpi.Runtime(comm, {"w": w, "x": x}, snapshot_every=3)


def step(k):
    g = np.tanh(w + x)
    comm.Allreduce(MPI.IN_PLACE, g)
    with rt.update():
        x[:] = 0.9 * x + 0.1 * g
        w[:] += 1e-3 * g


rt.run(step, steps // 2)
theirs = comm.sendrecv(float(np.linalg.norm(w)), dest=nxt, sendtag=13, source=prv, recvtag=13)
x += 1e-3 * theirs
rt.run(step, steps)
print(json.dumps({"event": "final", "rank": r, "digest": hashlib.sha256(w.tobytes() + x.tobytes()).hexdigest()[:16],
                  "recoveries": len(rt.history), "role": comm.role.value}), flush=True)
rt.close()
