"""Two dpmpi.Runtime runs with the state changed between them (``w *= 0.5``), the first run 10
steps long with a snapshot every 4 (its end is not a snapshot step). A failure in the second run
before its first snapshot restored the first run's last snapshot (epoch 8) on every rank, and the
job went on without the change: another result, no error (forty-third session). Now the end of a
run is committed and a later run first snapshots the state it starts from (dpmpi.epochs).
``--no-commit``: the first run with ``commit_at_end=False``, whose end took no snapshot (its last
step is no snapshot step), and ranks could leave it while others were still in it: the same
failure lost the change (forty-fifth session). Prints one line "final" per rank: its digest and
recoveries."""
import hashlib
import json
import sys

import dpmpi
import numpy as np

comm = dpmpi.init()
r = comm.Get_rank()
w = np.arange(64, dtype=np.float64) + r
rt = dpmpi.Runtime(comm, {"w": w}, snapshot_every=4)


def step(k):
    total = comm.allreduce(float(w.sum()))
    with rt.update():
        w[:] = 0.5 * w + 1e-3 * total + k


rt.run(step, 10, commit_at_end="--no-commit" not in sys.argv)
w *= 0.5  # (between the runs: a replacement does it again on the state the first run ended with)
rt.run(step, 20)
print(json.dumps({"event": "final", "rank": r, "digest": hashlib.sha256(w.tobytes()).hexdigest()[:16],
                  "recoveries": len(rt.history)}), flush=True)
rt.close()
