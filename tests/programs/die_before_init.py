"""Rank 1 is killed before MPI_Init (before it imports dpmpi); the others call dpmpi.init() and
wait inside MPI_Init for it for ever: dpmpi-run must end the job and say why."""
import os
import signal

if os.environ.get("OMPI_COMM_WORLD_RANK") == "1":
    os.kill(os.getpid(), signal.SIGKILL)

import dpmpi  # noqa: E402

comm = dpmpi.init()
print("initialised", comm.Get_rank(), flush=True)
