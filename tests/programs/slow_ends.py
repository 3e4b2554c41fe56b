"""A program the stall watchdog (DPMPI_STALL_TIMEOUT=1) must leave alone: with ``start``, no
dpmpi call for 1.5 s after importing dpmpi (a slow import or MPI_Init stands for it); with
``end``, rank 0 works 1.8 s more after the others ended, with a dpmpi call every 0.3 s (progress),
while the others wait at their end for it. Each rank prints ``done RANK SUM``."""
import sys
import time

import dpmpi

if "start" in sys.argv:
    time.sleep(1.5)
comm = dpmpi.init()
total = comm.allreduce(comm.Get_rank())
if "end" in sys.argv and comm.Get_rank() == 0:
    for _ in range(6):
        time.sleep(0.3)
        comm.Iprobe(source=0, tag=99)  # (a dpmpi call: progress)
print("done", comm.Get_rank(), total, flush=True)
