"""A 2-D Jacobi heat stencil (rows decomposed over ranks, halos exchanged with Sendrecv) that
survives the death of a rank: the classic ULFM/Fenix example, with no recovery code in it.

    dpmpi-run -n 5 --spares 1 -- python examples/jacobi.py --steps 100
    DPMPI_FAULTS=1:step@50:KILL dpmpi-run -n 5 --spares 1 -- python examples/jacobi.py

Compare jacobi_mpi4py.py, the same stencil on plain mpi4py. Every rank prints JSON lines.
"""
import dpmpi
from workloads import Jacobi, finish, parse, report

args = parse(__doc__, "jacobi")
comm = dpmpi.init()
grid = Jacobi(args.state_mib, comm.Get_size(), args.width)
block = grid.initial_state(comm.Get_rank())  # {"u": this rank's rows plus two halo rows}
rt = dpmpi.Runtime(comm, block, snapshot_every=args.snapshot_every)
rt.on_event(report)


def sweep(k):
    dpmpi.faults.point("step")
    delta = grid.step(comm, block, k, rt.update)  # halo exchange, stencil, then the update
    if args.progress:
        report({"event": "step", "rank": comm.Get_rank(), "step": k, "delta": delta})


rt.run(sweep, args.steps)
finish(rt, block)
