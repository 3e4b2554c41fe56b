"""The stencil of jacobi.py on plain mpi4py: no spares, no snapshots; a dead rank ends the job,
and with --checkpoint-dir a relaunch resumes from the newest checkpoint of every rank.

    mpirun -n 4 python examples/jacobi_mpi4py.py --steps 100 --checkpoint-dir ckpt --checkpoint-every 10
"""
from mpi4py import MPI
from workloads import Jacobi, parse, plain_loop

args = parse(__doc__, "jacobi", twin=True)
comm = MPI.COMM_WORLD
grid = Jacobi(args.state_mib, comm.Get_size(), args.width)
plain_loop(comm, grid, grid.initial_state(comm.Get_rank()), args)
