"""A stranger's program (written from the README only): overlap by a progress thread. Each step
posts an ``Iallreduce`` of its gradient; a helper thread of the program's own polls the request
(``req.Test()``) until it completes and sets an event, while the main thread computes the next
part and then waits on that event (``threading.Event.wait``). The helper records an exception it
gets instead of crashing. Prints the ranks' digests on rank 0.
    ACTIVE=1 LO=1 HI=8 bench/strangers/loop.sh progress_thread.py 150 20"""
import hashlib
import json
import sys
import threading

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 150
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
W = np.random.default_rng(11).standard_normal((300, 300)) * 0.05
rt = dpmpi.Runtime(comm, {"W": W}, snapshot_every=2)
helper_errors = []


def progress(req, done):
    try:
        while not req.Test():
            pass
    except Exception as exc:  # (the step learns of it through its own calls)
        helper_errors.append(type(exc).__name__)
    finally:
        done.set()


def step(k):
    x = np.random.default_rng(1000 * k + r).standard_normal((64, 300))
    g = x.T @ np.tanh(x @ W) / 64
    req = comm.Iallreduce(MPI.IN_PLACE, g, op=MPI.SUM)
    done = threading.Event()
    t = threading.Thread(target=progress, args=(req, done), daemon=True)
    t.start()
    extra = np.tanh(x @ W.T).sum()  # overlapped work
    done.wait()
    t.join()
    check = np.array([extra])
    comm.Allreduce(MPI.IN_PLACE, check, op=MPI.SUM)  # (a failure the helper swallowed surfaces here)
    with rt.update():
        W[...] -= 0.01 * g / n + 1e-9 * check[0]


rt.run(step, steps)
h = hashlib.sha256(W.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": d, "recoveries": len(rt.history)}), flush=True)
