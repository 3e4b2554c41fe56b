"""Rank 1 forks a child that outlives it (a data loader's worker waiting for tasks), then dies
(``kill`` SIGKILLs itself at step 5; ``hang`` stops making progress, for the stall watchdog).
Before the thirty-fifth session the job completed and then hung, the child holding its output.
Prints ``{"event": "child", "pid"}`` from rank 1 and ``{"event": "done", "rank", "x"}`` from each."""
import json
import os
import sys
import time

import numpy as np

import dpmpi
from mpi4py import MPI

how = sys.argv[1]
comm = dpmpi.init()
x = np.zeros(1)
rt = dpmpi.Runtime(comm, {"x": x})
victim = comm.Get_rank() == 1 and comm.role is dpmpi.Role.INITIAL
if victim:
    child = os.fork()
    if child == 0:
        time.sleep(120)
        os._exit(0)
    print(json.dumps({"event": "child", "pid": child}), flush=True)


def step(k):
    if k == 5 and victim:
        if how == "kill":
            os.kill(os.getpid(), 9)
        while True:
            time.sleep(1)
    y = np.ones(1)
    comm.Allreduce(MPI.IN_PLACE, y)
    with rt.update():
        x[:] += y


rt.run(step, 20)
print(json.dumps({"event": "done", "rank": comm.Get_rank(), "x": float(x[0])}), flush=True)
