"""A preemption-aware loop: a SIGUSR1 handler of the program's own (argv[1] == "handler") sets a
flag; each step allreduces it, and the job stops at the same step everywhere (it runs until then:
without the signal, the test's own timeout ends it). Each active rank prints its pid once every
rank has run a step (a test then signals dpmpi-run), and at the end the step it stopped at and
how many SIGUSR1 it got."""
import json
import os
import signal
import sys

import dpmpi
import numpy as np
from mpi4py import MPI

got = [0]
if sys.argv[1] == "handler":
    signal.signal(signal.SIGUSR1, lambda signum, frame: got.__setitem__(0, got[0] + 1))
comm = dpmpi.init()
x = np.zeros(4)
rt = dpmpi.Runtime(comm, {"x": x})


class Stop(Exception):
    pass


def step(k):
    flag = np.array([got[0]], dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, flag, MPI.MAX)
    if flag[0]:
        raise Stop(k)
    if k == 1:
        print(json.dumps({"event": "running", "rank": comm.Get_rank(), "pid": os.getpid()}), flush=True)
    with rt.update():
        x[:] += 1


try:
    rt.run(step, 10**9)
    stopped = None
except Stop as e:
    stopped = e.args[0]
print(json.dumps({"event": "stopped", "rank": comm.Get_rank(), "step": stopped, "got": got[0]}), flush=True)
