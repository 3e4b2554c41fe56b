"""A 2-D Jacobi heat stencil (rows decomposed over ranks, halos exchanged with Sendrecv) that
survives the death of a rank: the classic ULFM/Fenix example, with no recovery code in it.

    dpmpi-run -n 5 --spares 1 -- python examples/jacobi.py --steps 100
    DPMPI_FAULTS=1:step@50:KILL dpmpi-run -n 5 --spares 1 -- python examples/jacobi.py

Compare jacobi_mpi4py.py, the same stencil on plain mpi4py. Every rank prints JSON lines.
"""
import dpmpi
from workloads import Jacobi, finish, parse, report

args = parse(__doc__, "jacobi")
comm = dpmpi.init(wait=False)  # a spare gets its communicator now (role SPARE) and waits in rt.run()
grid = Jacobi(args.state_mib, comm.active_size, args.width)
rank = comm.Get_rank() if comm.role is not dpmpi.Role.SPARE else -1
block = grid.initial_state(rank)  # {"u": this rank's rows plus two halo rows}; a spare's are overwritten
rt = dpmpi.Runtime(comm, block, snapshot_every=args.snapshot_every, replicas=args.replicas,
                   confirm_steps=args.confirm_steps)
rt.on_event(report)


def sweep(k):
    delta = grid.step(comm, block, k, rt.update)  # halo exchange, stencil, then the update
    if args.progress:
        report({"event": "step", "rank": comm.Get_rank(), "step": k, "delta": delta})


rt.run(sweep, args.steps)
finish(rt, block)
