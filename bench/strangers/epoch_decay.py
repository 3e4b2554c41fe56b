"""A stranger's program (written from the README only): a model trained in epochs, one
``rt.run`` per epoch, whose code between the epochs changes the state: the learning rate (an
array in the state) decays and the weights are renormalised, after an evaluation (``allreduce``)
of the loss. Epochs of 30 steps with a snapshot every 8 (an epoch's end is no snapshot step).
Before the forty-third session a death early in an epoch, before its first snapshot, restored
the previous epoch's last snapshot on every rank without the decay and the renormalisation: the
job ended with another result and exit code 0. Prints the ranks' digests on rank 0.
    ACTIVE=1 LO=0.5 HI=4 bench/strangers/loop.sh epoch_decay.py 12 12"""
import hashlib
import json
import sys

import dpmpi
import numpy as np

epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 12
comm = dpmpi.init()
r = comm.Get_rank()
rng = np.random.default_rng(5 + r)
w = rng.standard_normal((192, 192)) / 192
x = rng.standard_normal(192)
lr = np.array([0.05])
rt = dpmpi.Runtime(comm, {"w": w, "x": x, "lr": lr}, snapshot_every=8)


def step(k):
    y = np.tanh(w @ x)
    g = np.empty_like(y)
    comm.Allreduce(y, g)
    with rt.update():
        x[...] = 0.9 * x + 0.1 * g / comm.Get_size()
        w[...] -= lr[0] * np.outer(g, x) / 192


for epoch in range(epochs):
    rt.run(step, 30 * (epoch + 1))
    loss = comm.allreduce(float(np.square(x).sum()))
    lr *= 0.9  # (the schedule: part of the state, changed between the runs)
    w /= max(1.0, float(np.linalg.norm(w)) * (1.0 + 1e-3 * loss) / 10.0)
h = hashlib.sha256(w.tobytes() + x.tobytes() + lr.tobytes()).hexdigest()[:16]
d = comm.gather(h, root=0)
if r == 0:
    print(json.dumps({"digest": hashlib.sha256("".join(d).encode()).hexdigest()[:16],
                      "recoveries": len(rt.history)}))
rt.close()
