"""Rank 1 is killed before MPI_Init (before it imports dpmpi), in the job's first launch only
(DPMPI_REPLACEMENT: a launch again by dpmpi-run, as planned faults do); the others call
dpmpi.init() and wait inside MPI_Init for it for ever: dpmpi-run must end that launch, say why,
and launch the job again (DPMPI_START_RETRIES)."""
import os
import signal

if os.environ.get("OMPI_COMM_WORLD_RANK") == "1" and not os.environ.get("DPMPI_REPLACEMENT"):
    os.kill(os.getpid(), signal.SIGKILL)

import dpmpi  # noqa: E402

comm = dpmpi.init()
print("initialised", comm.Get_rank(), flush=True)
