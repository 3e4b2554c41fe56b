"""A plain mpi4py program (no dpmpi) that makes communicators, for Open MPI's crash when a
communicator still being created is revoked (cext/dpmpi_revoke.c). ``fresh_comms.py MODE``:

    revoke  rank 0 revokes each new Dup at once, while the others may still be inside that Dup
    die     4 rounds of a Dup and a Split of COMM_WORLD (the test's preloaded kill_in_activate
            kills a rank inside one of them: the others are inside the same creation)

Prints one JSON line per rank: the error class each rank met (None: none) and the rounds done."""
import json
import sys

from mpi4py import MPI

mode = sys.argv[1]
world = MPI.COMM_WORLD
world.Set_errhandler(MPI.ERRORS_RETURN)
rank = world.Get_rank()
error, rounds, revoked = None, 0, 0
try:
    for rounds in range(4):
        if mode == "revoke":
            c = world.Dup()
            c.Set_errhandler(MPI.ERRORS_RETURN)
            if rank == 0:
                c.Revoke()
            try:
                c.Barrier()
            except MPI.Exception as exc:
                revoked += exc.Get_error_class() == MPI.ERR_REVOKED
            c.Free()
        else:
            world.Dup().Free()
            world.Split(rank % 2, rank).Free()
    rounds += 1
    world.Barrier()
except MPI.Exception as exc:
    error = exc.Get_error_class()
print(json.dumps({"event": "done", "rank": rank, "error": error, "rounds": rounds, "revoked": revoked}), flush=True)
