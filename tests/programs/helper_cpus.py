"""One rank snapshots 8 MiB (a copy thread's job) and prints the CPUs of its main thread and of
its snapshot copy thread (tests/test_snapshot.py: DPMPI_HELPER_CPUS)."""
import json
import os

import numpy as np

import dpmpi


def cpus_of_thread(name):
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().strip() != name:
                    continue
            return sorted(os.sched_getaffinity(int(tid)))
        except OSError:
            continue
    return None


comm = dpmpi.init()
state = {"a": np.arange(1 << 20, dtype=np.float64)}
snap = dpmpi.Snapshot(comm, state, replicas=0)
for epoch in (1, 2):
    snap.stage()
    snap.commit(epoch)
    snap.wait()
print(json.dumps({"event": "cpus", "main": sorted(os.sched_getaffinity(0)), "copy": cpus_of_thread("dpmpi-copy")}))
snap.close()
