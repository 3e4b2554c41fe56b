"""A stranger's program (written from the README only): a preemption-aware training script, as
batch-system jobs are written. A SIGTERM handler of the program's own sets a flag; each step
allreduces the flag (MAX) with its loss, and once any rank was asked to stop, every rank writes
its weights and the step to a checkpoint file (``np.savez`` in CKPT_DIR, default the working
directory) and leaves ``rt.run`` through the program's own ``Preempted`` exception, at the same
step everywhere. STOP_AT=k: rank 0 asks itself at step k (the reference for a SIGTERM from
outside). Prints the ranks' digests, the step it stopped at and the recoveries on rank 0.
    ACTIVE=1 bench/strangers/loop.sh preempt.py 600 12          (SIGKILL: recovered as usual)
    ACTIVE=1 bench/strangers/loop.sh preempt.py 600 12 TERM     (not loop.sh's oracle: a TERM stops
                                                                 the job early, see benchmarks.md)"""
import hashlib
import json
import os
import signal
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 600
stop_at = int(os.environ.get("STOP_AT", "-1"))
ckpt_dir = os.environ.get("CKPT_DIR", ".")
asked = {"stop": False}


def on_term(signum, frame):
    asked["stop"] = True


signal.signal(signal.SIGTERM, on_term)

comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
rng = np.random.default_rng(100 + r)
x = rng.standard_normal((384, 256))
y = np.sin(x @ np.linspace(-1.0, 1.0, 256))
w = np.zeros(256)
v = np.zeros(256)
rt = dpmpi.Runtime(comm, {"w": w, "v": v}, snapshot_every=2)


class Preempted(Exception):
    def __init__(self, step):
        super().__init__(step)
        self.step = step


def step(k):
    if k == stop_at and r == 0:
        asked["stop"] = True
    err = np.tanh(x @ w) - y
    g = x.T @ (err * (1 - np.tanh(x @ w) ** 2)) / len(y)
    comm.Allreduce(MPI.IN_PLACE, g)
    flags = np.array([float(err @ err), 1.0 if asked["stop"] else 0.0])
    out = np.empty(2)
    comm.Allreduce(flags[:1].copy(), out[:1], op=MPI.SUM)
    comm.Allreduce(flags[1:].copy(), out[1:], op=MPI.MAX)
    if out[1] > 0:
        raise Preempted(k)
    with rt.update():
        v[...] = 0.9 * v + g / n
        w[...] = w - 0.05 * v


stopped = steps
try:
    rt.run(step, steps)
except Preempted as p:
    stopped = p.step
    np.savez(os.path.join(ckpt_dir, f"ckpt-{r}.npz"), w=w, v=v, step=p.step)
h = hashlib.sha256(w.tobytes() + v.tobytes()).hexdigest()[:16]
d = comm.gather((h, stopped), root=0)
if r == 0:
    assert len({s for _h, s in d}) == 1, d
    print(json.dumps({"digest": [x for x, _s in d], "stopped": stopped, "recoveries": len(rt.history)}), flush=True)
