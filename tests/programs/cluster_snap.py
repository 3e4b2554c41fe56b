"""Node-failure program for the simulated cluster (dpmpi.cluster_sim): every active rank commits
epochs whose contents depend on (rank, epoch); after committing epoch --pause-at, logical rank 0
says "paused" and waits until the harness writes a line to --fifo (the harness kills a node's
processes first), while the others go on into the next collective. After the failure everyone
repairs, restores and checks its arrays bit for bit against what that rank held at the restored
epoch, then runs to --epochs. One JSON line per event on stdout, each with the process's node."""
import argparse
import json
import time

import numpy as np

import dpmpi
from mpi4py import MPI

import snapstate
from snapstate import digest

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=6)
parser.add_argument("--pause-at", type=int, default=3)
parser.add_argument("--fifo", required=True)
parser.add_argument("--mib", type=float, default=1.0, help="state per rank, MiB")
parser.add_argument("--replicas", type=int, default=1)
args = parser.parse_args()

comm = dpmpi.init()
wid = MPI.COMM_WORLD.Get_rank()
node = MPI.Get_processor_name()


def log(event, **fields):
    print(json.dumps({"event": event, "wid": wid, "rank": comm.Get_rank(), "node": node, "time": time.time(),
                      **fields}), flush=True)


def expected(rank, epoch):
    return snapstate.expected(args.mib, rank, epoch)


state = {k: v.copy() for k, v in expected(comm.Get_rank(), 0).items()}
snap = dpmpi.Snapshot(comm, state, replicas=args.replicas)
log("active", role=comm.role.value)


def restore():
    """The epoch to go on from, or None when the snapshot is lost."""
    return snapstate.restore(snap, state, args.mib, comm.Get_rank, log, lambda: dict(role=comm.role.value))


paused = comm.role is dpmpi.Role.RECOVERED  # only the first life pauses
epoch = restore() if comm.role is dpmpi.Role.RECOVERED else 1
while epoch is not None and epoch <= args.epochs:
    try:
        for name, value in expected(comm.Get_rank(), epoch).items():
            state[name][...] = value
        snap.stage()
        snap.commit(epoch)
        if epoch == args.pause_at and not paused:
            paused = True
            if comm.Get_rank() == 0:
                log("paused", epoch=epoch)
                with open(args.fifo) as go:  # blocks until the harness has struck
                    go.readline()
        # the application's own traffic. Across nodes (TCP), Open MPI 5.0.11 sometimes completes
        # a survivor's collective without an error but without the data of peers killed during
        # it (docs/cluster.md): only an agreement after it says whether the result holds.
        total = np.array([epoch], dtype=np.int64)
        comm.Allreduce(MPI.IN_PLACE, total, op=MPI.SUM)
        comm.Agree(1)
        assert total[0] == epoch * comm.Get_size(), total
        epoch += 1
    except (dpmpi.ProcFailedError, dpmpi.RevokedError) as exc:
        log("caught", epoch=epoch, error=type(exc).__name__)
        comm.Respawn()
        ev = comm.history[-1]
        log("repaired", size=comm.Get_size(), detected_at=ev.detected_at, repaired_at=ev.repaired_at,
            total_ms=ev.total_ms, phases_ms=ev.phases_ms, filled={str(k): v for k, v in ev.filled.items()})
        epoch = restore()
if epoch is not None:
    log("done", epoch=snap.epoch, role=comm.role.value, size=comm.Get_size(), digest=digest(state),
        want=digest(expected(comm.Get_rank(), args.epochs)))
snap.close()
