"""A stranger's program: in-memory snapshots with one copy each, and a disk fallback
(``persist_dir``, every 5th step) for when a rank and its copy's holder die together. A
diffusion on a ring of ranks: each step exchanges edge values with both neighbours
(``Sendrecv``), then updates two state arrays. The directory is the job's own (named after PMIx's
namespace of the launch, which its spares share; ``PERSIST_DIR`` names another). Prints the
digests on rank 0.
    ACTIVE=1 KILLS=2 SPARES=2 GAP=0.03 bench/strangers/loop.sh persist_step.py 1200 8"""
import hashlib, json, os, sys
import dpmpi, numpy as np
from mpi4py import MPI
steps = int(sys.argv[1])
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
where = os.environ.get("PERSIST_DIR") or os.path.join(
    "/tmp", "persist_step", os.environ.get("PMIX_NAMESPACE", "x").replace("/", "_"))
os.makedirs(where, exist_ok=True)
u = np.cos(np.arange(4096) * (r + 1) / 4096.0)
v = np.zeros(4096)
rt = dpmpi.Runtime(comm, {"u": u, "v": v}, replicas=1, persist_dir=where, persist_every=5)
left, right = (r - 1) % n, (r + 1) % n
def step(k):
    lo, hi = np.empty(1), np.empty(1)
    comm.Sendrecv(u[-1:], dest=right, recvbuf=lo, source=left)
    comm.Sendrecv(u[:1], dest=left, recvbuf=hi, source=right)
    lap = np.concatenate([lo, u[:-1]]) + np.concatenate([u[1:], hi]) - 2 * u
    with rt.update():
        v[:] = 0.9 * v + 0.1 * lap
        u[:] = u + 0.2 * v + 1e-6 * k
rt.run(step, steps)
h = hashlib.sha256(u.tobytes() + v.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
