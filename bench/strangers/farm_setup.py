"""A stranger's program (written from the README only): a task farm in the setup, then a loop
(``task_farm.py`` farms inside each step).
Rank 0 hands out 48 tasks to whichever worker asks first (``recv`` from ``MPI.ANY_SOURCE``, the
usual master-worker idiom), each ~40 ms of numpy work on the worker; the results, broadcast,
build every rank's state, which a dpmpi.Runtime loop then evolves (an ``Allreduce`` per step).
A replacement cannot redo a receive from ``ANY_SOURCE`` (the order in which the dead rank's
messages were matched died with it), so a death during the farm ends the job; no rank has a
snapshot then, and since the forty-sixth session dpmpi-run launches the job again. On this 2-core
VM (5 processes) the farm takes ~8.5 s (rank 0 and the spare poll), so a kill from outside 0.8-9 s
in lands in it: 27 of 27 runs relaunched and ended with the failure-free digests. Later, a
worker's death is recovered (its replacement's receives come from rank 0's log), rank 0's is not:
its replacement raises ReplayError at the ``ANY_SOURCE`` receive and the job shrinks to 3 ranks
(docs/spares.md, not covered), and this program, whose rank 0 prints, prints nothing then.
Prints the ranks' digests on rank 0.
    ACTIVE=1 LO=0.8 HI=9 bench/strangers/loop.sh farm_setup.py 3000 12"""
import hashlib
import json
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

TASKS = 48
steps = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()


def work(task):
    a = np.random.default_rng(task).standard_normal((200, 200))
    for _ in range(60):  # (~40 ms here)
        a = np.sin(a @ a.T / 20 + 0.1 * task)
    return float(np.abs(a).sum())  # (the same for a task whichever rank does it: a pure function of it)


if r == 0:
    results, handed, finished = {}, 0, 0
    while finished < n - 1:
        status = MPI.Status()
        msg = comm.recv(source=MPI.ANY_SOURCE, tag=1, status=status)
        if msg is not None:
            results[msg[0]] = msg[1]
        if handed < TASKS:
            comm.send(handed, dest=status.Get_source(), tag=2)
            handed += 1
        else:
            comm.send(None, dest=status.Get_source(), tag=2)
            finished += 1
    table = np.array([results[t] for t in range(TASKS)])
else:
    out = None
    while True:
        comm.send(out, dest=0, tag=1)
        task = comm.recv(source=0, tag=2)
        if task is None:
            break
        out = (task, work(task))
    table = None
table = comm.bcast(table, root=0)
w = np.tile(table / table.max(), 256) * (r + 1)
rt = dpmpi.Runtime(comm, {"w": w}, snapshot_every=4)


def step(k):
    g = np.tanh(w) * 1e-3
    comm.Allreduce(MPI.IN_PLACE, g)
    with rt.update():
        w[:] = 0.999 * w - g + 1e-3 * np.cos(k + r)


rt.run(step, steps)
d = comm.gather(hashlib.sha256(w.tobytes()).hexdigest()[:16], root=0)
if r == 0:
    sys.stdout.write(json.dumps({"digest": d, "recoveries": len(rt.history)}) + "\n")
