"""A stranger's program (written from the README only): a master-worker task farm inside each
step. Rank 0 hands out tasks with ``Send``; workers answer with results of varying length that
the master takes in arrival order (``Probe`` from ``MPI.ANY_SOURCE``, ``Get_count``, then
``Recv``) and gives the answering worker the next task. Results are folded into the state by
task number, so the outcome does not depend on who computed what or when. Prints the ranks'
digests on rank 0.
    bench/strangers/loop.sh task_farm.py 60 20"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 60
TASKS, STOP = 24, -1
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
acc = np.zeros((TASKS, 64))          # per-task running sums
seen = np.zeros(1, dtype=np.int64)   # tasks done so far, over all steps
rt = dpmpi.Runtime(comm, {"acc": acc, "seen": seen}, snapshot_every=1)


def work(k, t):
    rng = np.random.default_rng(10_000 * k + t)
    m = rng.standard_normal((200, 200))
    for _ in range(3):
        m = np.tanh(m @ m.T / 200)
    return m[: 8 + (t % 5) * 8, :8].sum(axis=1)  # 8..40 numbers: the master probes the size


def master(k):
    results = {}
    task = 0
    for w in range(1, n):
        comm.send(task if task < TASKS else STOP, dest=w, tag=1)
        task += 1
    busy = min(n - 1, TASKS)
    while busy:
        st = MPI.Status()
        comm.Probe(source=MPI.ANY_SOURCE, tag=2, status=st)
        buf = np.empty(st.Get_count(MPI.DOUBLE) - 1)
        head = np.empty(st.Get_count(MPI.DOUBLE))
        comm.Recv(head, source=st.Get_source(), tag=2)
        t, buf[...] = int(head[0]), head[1:]
        results[t] = buf
        nxt = task if task < TASKS else STOP
        comm.send(nxt, dest=st.Get_source(), tag=1)
        task += 1
        if nxt == STOP:
            busy -= 1
    return results


def worker(k):
    while True:
        t = comm.recv(source=0, tag=1)
        if t == STOP:
            return
        out = work(k, t)
        comm.Send(np.concatenate(([float(t)], out)), dest=0, tag=2)


def step(k):
    results = master(k) if r == 0 else worker(k)
    mine = np.zeros((TASKS, 64))
    if r == 0:
        for t, v in results.items():
            mine[t, : v.size] = v
    comm.Bcast(mine, root=0)
    with rt.update():
        acc[...] = 0.5 * acc + mine
        seen[0] += TASKS


rt.run(step, steps)
h = hashlib.sha256(acc.tobytes() + seen.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
