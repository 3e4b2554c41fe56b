"""Rank 1 is killed before MPI_Init (before it imports dpmpi), in the job's first launch only
(DPMPI_REPLACEMENT: a launch again by dpmpi-run, as planned faults do); the others call
dpmpi.init() and wait inside MPI_Init for it for ever: dpmpi-run must end that launch, say why,
and launch the job again (DPMPI_START_RETRIES). DIE_ALWAYS=1: rank 1 dies in every launch."""
import os
import signal

first_launch = not os.environ.get("DPMPI_REPLACEMENT")
if os.environ.get("OMPI_COMM_WORLD_RANK") == "1" and (os.environ.get("DIE_ALWAYS") or first_launch):
    os.kill(os.getpid(), signal.SIGKILL)

import dpmpi  # noqa: E402

comm = dpmpi.init()
print("initialised", comm.Get_rank(), flush=True)
