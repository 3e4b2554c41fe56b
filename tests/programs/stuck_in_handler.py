"""A rank whose fatal-signal handler never returns: rank ``--victim`` replaces the MPI library's
SIGSEGV handler (before dpmpi.init) with one that sleeps for ever, as Open MPI's did when its
backtrace() met a lock the interrupted thread held, then sends itself SIGSEGV at step
``--at``. dpmpi's deadline on the handler must end it (SIGALRM) so that the spare replaces it;
the state, an integer sum, is checked against its closed form. tests/test_faults.py"""
import argparse
import ctypes
import json
import os
import signal
import time

import dpmpi  # noqa: F401  (first, before mpi4py.MPI)
import numpy as np
from mpi4py import MPI

p = argparse.ArgumentParser()
p.add_argument("--victim", type=int, default=1)
p.add_argument("--at", type=int, default=5)
p.add_argument("--steps", type=int, default=12)
args = p.parse_args()
world = MPI.COMM_WORLD.Get_rank()
if world == args.victim:
    @ctypes.CFUNCTYPE(None, ctypes.c_int)
    def stuck(signum):  # (in the signal handler: the main thread never comes back)
        while True:
            time.sleep(0.05)

    class Action(ctypes.Structure):  # struct sigaction on Linux x86_64 / aarch64
        _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16), ("flags", ctypes.c_int),
                    ("restorer", ctypes.c_void_p)]

    libc = ctypes.CDLL(None, use_errno=True)
    act = Action()
    act.handler = ctypes.cast(stuck, ctypes.c_void_p).value
    if libc.sigaction(signal.SIGSEGV, ctypes.byref(act), None) != 0:
        raise OSError(ctypes.get_errno(), "sigaction")
comm = dpmpi.init()
r = comm.Get_rank()
x = np.zeros(4, dtype=np.int64)
rt = dpmpi.Runtime(comm, {"x": x})


def step(k):
    s = np.full(4, r + k, dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, s)
    if k == args.at and world == args.victim:
        os.kill(os.getpid(), signal.SIGSEGV)
    with rt.update():
        x[:] += s


t0 = time.time()
rt.run(step, args.steps)
print(json.dumps({"event": "done", "rank": r, "x": x.tolist(), "role": comm.role.value,
                  "seconds": round(time.time() - t0, 3)}), flush=True)
