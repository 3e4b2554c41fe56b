"""Every rank commits epoch 1 without waiting for its replication (durable=False), then rank
``--victim`` SIGKILLs itself while that replication is in flight and the others end the program:
their Snapshot's close at exit must not wait out its grace for a job that the death cut short.
tests/test_snapshot.py"""
import argparse
import json
import os
import signal

import numpy as np

import dpmpi

p = argparse.ArgumentParser()
p.add_argument("--victim", type=int, default=2)
p.add_argument("--mib", type=int, default=32)
args = p.parse_args()
comm = dpmpi.init()
r = comm.Get_rank()
a = np.full(args.mib << 17, float(r))
snap = dpmpi.Snapshot(comm, {"a": a})
snap.stage()
snap.commit(0)
snap.stage()
snap.commit(1, durable=False)
if r == args.victim:
    os.kill(os.getpid(), signal.SIGKILL)
print(json.dumps({"event": "done", "rank": r}), flush=True)
