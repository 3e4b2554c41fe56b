"""A program on dpmpi's primitives (bench/strangers/primitives_loop.py) with two communicators
made before its first snapshot and kept, a row and a column, used in every step. A replacement's
setup gets both from the repair, in order (a hang in the thirty-eighth session's pins, before
e.g. DPMPI_FAULTS=1:Allreduce@100:KILL was answered right). Prints the ranks' digests on rank 0.
    primitives_comms.py STEPS"""
import sys, hashlib, json
import dpmpi
import numpy as np
from mpi4py import MPI

N = int(sys.argv[1]) if len(sys.argv) > 1 else 100
comm = dpmpi.init()
r = comm.Get_rank()
u = np.random.default_rng(3 + r).random(1 << 16)
acc = np.zeros(8)
row = comm.Split(r // 2, r)
col = comm.Split(r % 2, r)
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
                tot[0] += row.allreduce(1) + 10 * col.allreduce(1)
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
