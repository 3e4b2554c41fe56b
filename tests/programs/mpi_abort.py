"""A rank calls MPI_Abort (as Open MPI itself does on MPI_ERRORS_ARE_FATAL): under --with-ft ulfm
Open MPI ends only that process, with _exit(code), which ULFM never reports; the survivors hung.
dpmpi turns it into a death they notice; the spare takes over and every rank finishes."""
import dpmpi, time
from mpi4py import MPI
comm = dpmpi.init()

i = 0
while True:
    try:
        i = comm.allreduce(i if comm.role is not dpmpi.Role.RECOVERED else 10**9, op=MPI.MIN)
        while i < 300:
            if i == 100 and comm.Get_rank() == 1 and comm.role is dpmpi.Role.INITIAL:
                MPI.COMM_WORLD.Abort(7)
            comm.Allreduce(MPI.IN_PLACE, [bytearray(8), MPI.BYTE])
            i += 1
        break
    except (dpmpi.ProcFailedError, dpmpi.RevokedError):
        comm.Respawn()
print("done", comm.Get_rank(), i, flush=True)
