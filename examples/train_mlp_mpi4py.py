"""The training of train_mlp.py on plain mpi4py, as users run it today: no spares, no snapshots.

    mpirun -n 4 python examples/train_mlp_mpi4py.py --steps 40 --checkpoint-dir ckpt --checkpoint-every 10

When a rank dies, mpirun ends the whole job; the way back is to launch it again, and with
--checkpoint-dir it resumes from the newest checkpoint every rank wrote (dpmpi-bench e2e measures
that as the baseline). The math is the same as train_mlp.py's, bit for bit.
"""
from mpi4py import MPI
from workloads import MLP, parse, plain_loop

args = parse(__doc__, "mlp", twin=True)
model = MLP(args.state_mib, args.batch, wait_ms=args.wait_ms)
plain_loop(MPI.COMM_WORLD, model, model.initial_state(), args)
