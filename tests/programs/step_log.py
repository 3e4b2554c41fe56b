"""Rank 0 writes one line per step before the step's ``rt.update()``, guarded by a mark kept
outside the Runtime's state (``printed``), as docs/runtime.md advises: a recovery redoes the steps
after the restored epoch, and the mark (not rolled back) keeps a survivor from writing them twice;
written after the update, a line could be lost (the step's state committed, the step not redone). A
snapshot every 10 steps: a rank killed at the start of step 35 (the test's fault plan) has every
survivor restore epoch 30 or 20 and redo steps that rank 0 wrote (33 at least: the death came
after step 34's allreduce). Argument ``no-mark``: write every step done, redone ones too. Prints
a JSON line per step written ("logged") and, on rank 0, the recoveries."""
import json
import sys

import numpy as np

import dpmpi

comm = dpmpi.init()
r = comm.Get_rank()
x = np.zeros(4)
rt = dpmpi.Runtime(comm, {"x": x}, snapshot_every=10)
printed = -1  # outside the state: a restore does not roll it back


def step(k):
    global printed
    s = comm.allreduce(float(x.sum()) + r)
    if r == 0 and (k > printed or "no-mark" in sys.argv):  # (before rt.update(): see the docstring)
        sys.stdout.write(json.dumps({"event": "logged", "rank": r, "step": k}) + "\n")
        printed = k
    with rt.update():
        x[:] += s * 1e-6


rt.run(step, 60)
if r == 0:
    sys.stdout.write(json.dumps({"event": "history", "rank": r,
                                 "recoveries": [[h.failed_step, h.restored_epoch] for h in rt.history]}) + "\n")
