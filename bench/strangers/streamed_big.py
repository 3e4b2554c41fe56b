"""A stranger's program on the primitives with large state: three arrays of different sizes per
rank (~24 MiB), three copy threads, stage(epoch) in the background and commit(durable=False)
every step, so that copies finish units out of order and replications overlap the next step
(streamed where DPMPI_REPL_STREAM allows: run it with DPMPI_REPL_STREAM=1 to force it). A chaotic
map, so a wrong recovery cannot converge back to the right digests.
    DPMPI_REPL_STREAM=1 bench/strangers/loop.sh streamed_big.py 200 10"""
import sys, hashlib, json
import dpmpi
import numpy as np
from mpi4py import MPI

N = int(sys.argv[1]) if len(sys.argv) > 1 else 50
comm = dpmpi.init()
r = comm.Get_rank()
rng = np.random.default_rng(11 + r)
u = rng.random((5 << 20) // 8 + 1000 * r)
v = rng.random((3 << 20) // 4).astype(np.float32)
acc = np.zeros(8)
snap = dpmpi.Snapshot(comm, {"u": u, "v": v, "acc": acc}, replicas=1, threads=3)
FAIL = (dpmpi.ProcFailedError, dpmpi.RevokedError)

# one loop for steps and recoveries: k is None while this rank must restore (a replacement, or
# after a failure: then Respawn first, and again if a failure strikes the repair or the restore)
k, staged, respawn = None, False, False  # staged: an epoch staged last step, not committed yet
if comm.role is not dpmpi.Role.RECOVERED:
    snap.stage(0)
    snap.commit(0)
    k = 0
while k is None or k < N:
    try:
        if k is None:
            if respawn:
                comm.Respawn()
            k, staged, respawn = snap.restore(), False, False
            continue
        with dpmpi.interrupt_on_failure():
            tot = np.empty(1)
            comm.Allreduce(np.array([u[::97].sum() + float(v[::89].sum())]), tot, op=MPI.SUM)
            if staged:
                snap.commit(k, durable=False)  # (the epoch staged last step)
                staged = False
            u[:] = 3.9 * u * (1.0 - u)
            v[:] = np.float32(3.8) * v * (np.float32(1.0) - v)
            acc[k % 8] += tot[0]
            snap.stage(k + 1)
            staged = True
            k += 1
    except FAIL:
        k, respawn = None, True
if staged:
    snap.commit(k, durable=False)
snap.wait()
h = hashlib.sha256()
for a in (u, v, acc):
    h.update(a.tobytes())
d = comm.gather(h.hexdigest()[:16], root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": comm.repairs}), flush=True)
snap.close()
