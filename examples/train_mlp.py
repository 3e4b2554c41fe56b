"""Data-parallel training of a small MLP that survives the death of a rank.

    dpmpi-run -n 5 --spares 1 -- python examples/train_mlp.py --steps 40
    DPMPI_FAULTS=2:step@20:KILL dpmpi-run -n 5 --spares 1 -- python examples/train_mlp.py

The program has no recovery code: it describes its state (weights and Adam moments) and one
step; dpmpi.Runtime snapshots the state after every update (copied off the critical path and
replicated to a buddy rank), and when a rank dies it repairs the communicator with a spare in
the dead rank's place, restores every rank's state from the newest snapshot and goes on. Compare
train_mlp_mpi4py.py, the same training on plain mpi4py. Every rank prints JSON lines.
"""
import dpmpi
from workloads import MLP, finish, parse, report

args = parse(__doc__, "mlp")
# wait=False: the last DPMPI_SPARES ranks get a communicator too (role SPARE), build their state
# and snapshot memory now, and wait in rt.run() until one of them is needed (a warm spare)
comm = dpmpi.init(wait=False)
model = MLP(args.state_mib, args.batch, wait_ms=args.wait_ms)
weights = model.initial_state()  # {"params", "m", "v"}; a replacement gets the snapshot's values
# same_start: every rank (and spare) builds these same starting weights, so a warm spare can take
# the place of a rank that dies before its first snapshot reached a buddy
rt = dpmpi.Runtime(comm, weights, snapshot_every=args.snapshot_every, replicas=args.replicas,
                   confirm_steps=args.confirm_steps, same_start=True)
rt.on_event(report)


def train_step(k):
    loss = model.step(comm, weights, k, rt.update)  # Allreduce of gradients, then Adam inside rt.update()
    if args.progress:
        report({"event": "step", "rank": comm.Get_rank(), "step": k, "loss": loss})


rt.run(train_step, args.steps)
finish(rt, weights)
