"""NcclComm test program (fake backend on a CPU, or CuPy): active ranks loop Allreduce on device
arrays over an NcclComm and a Split of it; on a failure they call Respawn(), which rebuilds both.
One JSON line per event on stdout. --ops: also check every operation once at the start."""
import argparse
import hashlib
import json
import time

import numpy as np

import dpmpi
from dpmpi import Role
from dpmpi.gpu import NcclComm, get_backend
from mpi4py import MPI

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=40)
parser.add_argument("--n", type=int, default=1000, help="elements per allreduce")
parser.add_argument("--ops", action="store_true", help="check every operation once")
args = parser.parse_args()

comm = dpmpi.init()
wid = comm.process_id
be = get_backend()


def log(event, **fields):
    print(json.dumps({"event": event, "wid": wid, "rank": comm.Get_rank(), "time": time.time(), **fields}), flush=True)


def host(a):
    return be.to_numpy(a)


def respawn():
    """Repair; a failure during the repair (the NCCL rebuild included) means: repair again."""
    while True:
        try:
            comm.Respawn()
            return
        except (dpmpi.ProcFailedError, dpmpi.RevokedError) as exc:
            log("respawn-failed", error=type(exc).__name__, message=str(exc)[:200])


def build():
    """A replacement bootstraps while the survivors rebuild: a death then fails both; repair, retry."""
    while True:
        try:
            nc = NcclComm(comm)
            return nc, nc.Split(comm.Get_rank() % 2, comm.Get_rank())
        except (dpmpi.ProcFailedError, dpmpi.RevokedError) as exc:
            log("build-failed", error=type(exc).__name__, message=str(exc)[:200])
            respawn()


nc, half = build()
first_uid = nc.uid_digest
color = comm.Get_rank() % 2  # the split's colour; a shrink renumbers the ranks but keeps the colours
colors = comm.allgather(color)
log("bootstrap", role=comm.role.value, size=nc.Get_size(), nccl_rank=nc.Get_rank(), half_size=half.Get_size(),
    uid=nc.uid_digest, half_uid=half.uid_digest, backend=be.name)


def check_ops():
    r, n = nc.Get_rank(), nc.Get_size()
    bad = []
    x = be.asarray(np.arange(6, dtype=np.float64) * (r + 1))
    y = be.zeros(6, "float64")
    nc.Allreduce(x, y)
    if not np.array_equal(host(y), np.arange(6) * n * (n + 1) / 2):
        bad.append("Allreduce")
    m = be.asarray(np.full(3, r, np.int64))
    nc.Allreduce(MPI.IN_PLACE, m, op=MPI.MAX)
    if not np.array_equal(host(m), np.full(3, n - 1)):
        bad.append("Allreduce-max")
    b = be.asarray(np.full(4, 7 if r == n - 1 else 0, np.int32))
    nc.Bcast(b, root=n - 1)
    if not np.array_equal(host(b), np.full(4, 7)):
        bad.append("Bcast")
    red = be.zeros(2, "float32")
    nc.Reduce(be.asarray(np.full(2, r + 1, np.float32)), red, root=0)
    if r == 0 and not np.array_equal(host(red), np.full(2, n * (n + 1) / 2)):
        bad.append("Reduce")
    g = be.zeros(2 * n, "int64")
    nc.Allgather(be.asarray(np.array([r, 10 * r], np.int64)), g)
    if not np.array_equal(host(g), np.array([[q, 10 * q] for q in range(n)]).reshape(-1)):
        bad.append("Allgather")
    rs = be.zeros(2, "float64")
    nc.Reduce_scatter(be.asarray(np.arange(2 * n, dtype=np.float64)), rs)
    if not np.array_equal(host(rs), n * np.arange(2 * r, 2 * r + 2)):
        bad.append("Reduce_scatter")
    if n > 1:
        token = be.asarray(np.array([r], np.int64))
        if r % 2 == 0 and r + 1 < n:
            nc.Send(token, r + 1)
        elif r % 2 == 1:
            nc.Recv(token, r - 1)
            if host(token)[0] != r - 1:
                bad.append("Send/Recv")
    try:
        nc.Allreduce(np.zeros(3), be.zeros(3, "float64"))
        bad.append("host buffer accepted")
    except TypeError:
        pass
    log("ops", bad=bad)


if args.ops:
    check_ops()

i = 0
digest = hashlib.sha256()
while True:
    try:
        i = comm.allreduce(i if comm.role is not Role.RECOVERED or i else args.iters, op=MPI.MIN)
        while i < args.iters:
            n, r = nc.Get_size(), nc.Get_rank()
            x = be.zeros(args.n, "float64")
            x.fill((r + 1) * (i + 1))
            nc.Allreduce(MPI.IN_PLACE, x)
            want = (i + 1) * n * (n + 1) / 2
            hx = host(x)
            if not (hx == want).all():
                log("wrong-sum", iteration=i, got=float(hx[0]), want=want)
            h = be.asarray(np.array([r], np.int64))
            half.Allreduce(MPI.IN_PLACE, h)
            hwant = sum(q for q in range(n) if colors[q] == color)
            if int(host(h)[0]) != hwant:
                log("wrong-split", iteration=i, got=int(host(h)[0]), want=hwant)
            i += 1
        break
    except (dpmpi.ProcFailedError, dpmpi.RevokedError) as exc:
        log("caught", iteration=i, error=type(exc).__name__, aborted=nc.aborted, half_aborted=half.aborted,
            message=str(exc)[:200])
        respawn()
        colors = comm.allgather(color)
        log("rebuilt", role=comm.role.value, size=nc.Get_size(), nccl_rank=nc.Get_rank(), rebuilds=nc.rebuilds,
            half_rebuilds=half.rebuilds, uid=nc.uid_digest, first_uid=first_uid, repairs=comm.repairs,
            attempts=comm.history[-1].attempts)
log("done", role=comm.role.value, size=nc.Get_size(), iterations=i, rebuilds=nc.rebuilds, repairs=comm.repairs)
