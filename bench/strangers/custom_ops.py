"""A stranger's program (written from the README only): a particle swarm over a test function,
where each step combines the ranks' bests with a user-defined reduction (``MPI.Op.Create``, in
``Allreduce`` and ``Iallreduce``), finds the best rank with ``MAXLOC`` on ``MPI.DOUBLE_INT``,
exchanges boundary particles with both ring neighbours through ``Isend``/``Irecv`` completed by
``Request.Waitany`` and ``Request.Testsome``, and names and configures its communicator as a
careful MPI user would (``Set_name``, ``Set_errhandler(MPI.ERRORS_RETURN)``, ``Get_attr``).
Prints the ranks' digests on rank 0.
    bench/strangers/loop.sh custom_ops.py 400 20"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 400
comm = dpmpi.init()
comm.Set_name("swarm")
comm.Set_errhandler(MPI.ERRORS_RETURN)
assert comm.Get_attr(MPI.TAG_UB) >= 32767
r, n = comm.Get_rank(), comm.Get_size()
D, P = 8, 4096                                 # dimensions, particles per rank
rng = np.random.default_rng(100 + r)
x = rng.uniform(-5, 5, (P, D))
v = np.zeros((P, D))
best = np.full(D + 1, np.inf)                  # [f, x...] of the swarm's best so far
noise = np.zeros(2, dtype=np.uint64)           # a counter-based stream: (key, counter)
noise[0] = 7 + r


def better(inbuf, inoutbuf, datatype):
    """The user's reduction: keep the [f, x...] row with the smaller f (ties: the smaller x)."""
    a = np.frombuffer(inbuf, dtype=np.float64).reshape(-1, D + 1)
    b = np.frombuffer(inoutbuf, dtype=np.float64).reshape(-1, D + 1)
    take = (a[:, 0] < b[:, 0]) | ((a[:, 0] == b[:, 0]) & (a[:, 1] < b[:, 1]))
    b[take] = a[take]


BETTER = MPI.Op.Create(better, commute=True)
rt = dpmpi.Runtime(comm, {"x": x, "v": v, "best": best, "noise": noise}, snapshot_every=2)


def f(p):
    return np.sum(p * p - 10 * np.cos(2 * np.pi * p), axis=1) + 10 * D   # Rastrigin


def step(k):
    g = np.random.default_rng([int(noise[0]), int(noise[1])])
    fx = f(x)
    i = int(np.argmin(fx))
    mine = np.concatenate(([fx[i]], x[i]))
    swarm = np.empty(D + 1)
    comm.Allreduce(mine, swarm, op=BETTER)
    pair = np.array([(-fx[i], r)], dtype=np.dtype([("v", np.float64), ("r", np.int32)], align=True))
    top = np.empty_like(pair)
    comm.Allreduce([pair, MPI.DOUBLE_INT], [top, MPI.DOUBLE_INT], op=MPI.MAXLOC)
    # boundary particles to both neighbours, completed in whatever order they arrive
    left, right = (r - 1) % n, (r + 1) % n
    send_l, send_r = x[:16].copy(), x[-16:].copy()
    from_l, from_r = np.empty_like(send_l), np.empty_like(send_r)
    reqs = [comm.Irecv(from_l, left, tag=k % 100), comm.Irecv(from_r, right, tag=k % 100),
            comm.Isend(send_r, right, tag=k % 100), comm.Isend(send_l, left, tag=k % 100)]
    done = set()
    while len(done) < 2:
        idx = MPI.Request.Waitany(reqs[:2])
        if idx != MPI.UNDEFINED:
            done.add(idx)
    while True:
        got = MPI.Request.Testsome(reqs[2:])
        if got is None or all(q == MPI.REQUEST_NULL for q in reqs[2:]):
            break
    req = comm.Iallreduce(mine, later := np.empty(D + 1), op=BETTER)
    spread = x.std(axis=0)
    req.Wait()
    with rt.update():
        if swarm[0] < best[0]:
            best[...] = swarm
        r1, r2 = g.random((P, D)), g.random((P, D))
        v[...] = 0.7 * v + 1.4 * r1 * (best[1:] - x) + 0.3 * r2 * (later[1:] - x)
        v[:16] += 1e-3 * (from_l - x[:16])
        v[-16:] += 1e-3 * (from_r - x[-16:])
        x[...] = np.clip(x + v, -5, 5) + 1e-9 * spread * (top["r"][0] == r)
        noise[1] += 1


rt.run(step, steps)
assert comm.Get_name() == "swarm", comm.Get_name()
h = hashlib.sha256(x.tobytes() + v.tobytes() + best.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history), "best": float(best[0])}), flush=True)
