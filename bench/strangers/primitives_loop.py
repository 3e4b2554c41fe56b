"""A stranger's program on the primitives alone (the README's second snippet): Snapshot,
stage/commit every step, interrupt_on_failure, Respawn and restore with the retry the README asks
for; a chaotic map (logistic), so a wrong recovery cannot converge back to the right digests.
    bench/strangers/loop.sh primitives_loop.py 1500 20"""
import sys, hashlib, json
import dpmpi
import numpy as np
from mpi4py import MPI

N = int(sys.argv[1]) if len(sys.argv) > 1 else 100
comm = dpmpi.init()
r = comm.Get_rank()
u = np.random.default_rng(3 + r).random(1 << 16)
acc = np.zeros(8)
snap = dpmpi.Snapshot(comm, {"u": u, "acc": acc}, replicas=1)
FAIL = (dpmpi.ProcFailedError, dpmpi.RevokedError)

def recover(repair):
    while True:
        try:
            if repair:
                comm.Respawn()
            return snap.restore()
        except FAIL:
            repair = True

if comm.role is dpmpi.Role.RECOVERED:
    k = recover(False)
else:
    snap.stage(); snap.commit(0)
    k = 0
while k < N:
    try:
        with dpmpi.interrupt_on_failure():
            while k < N:
                n = comm.Get_size()
                left, right = (r - 1) % n, (r + 1) % n
                halo = np.empty(16)
                comm.Sendrecv(u[:16].copy(), dest=left, recvbuf=halo, source=right)
                s = np.array([u.sum()])
                tot = np.empty(1)
                comm.Allreduce(s, tot, op=MPI.SUM)
                for _ in range(1):
                    u[:] = 3.9 * u * (1.0 - u)
                u[-16:] = 0.5 * (u[-16:] + halo)
                acc[k % 8] += tot[0]
                snap.stage(); snap.commit(k + 1)
                k += 1
    except FAIL:
        k = recover(True)
h = hashlib.sha256(); h.update(u.tobytes()); h.update(acc.tobytes())
d = comm.gather(h.hexdigest()[:16], root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": comm.repairs}), flush=True)
snap.close()
