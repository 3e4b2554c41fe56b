"""Snapshot test program: every active rank commits epochs whose contents depend on (rank, epoch)
(and whose array sizes differ between ranks); faults kill ranks at the points "staged" (a
staging copy in flight) or "committed" (after a commit); the survivors Respawn(), everyone
restores, checks the arrays bit for bit against what that rank held at the restored epoch, and
carries on (fault point "restored": right after a survivor's restore). With --swap it restores as
dpmpi.Runtime does (restore(swap=True), then wait_refill() before writing the arrays). One JSON
line per event on stdout."""
import argparse
import json
import sys
import time


import dpmpi
from mpi4py import MPI

import snapstate
from snapstate import digest

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=8)
parser.add_argument("--mib", type=float, default=4.0, help="state per rank, MiB")
parser.add_argument("--replicas", type=int, default=1)
parser.add_argument("--persist", default=None, help="persist_dir (every epoch)")
parser.add_argument("--sync", action="store_true", help="wait for each epoch's replication before going on")
parser.add_argument("--threads", type=int, default=1)
parser.add_argument("--auto", action="store_true", help="stage(epoch): commit in the background")
parser.add_argument("--overlap", action="store_true", help="commit(epoch, durable=False): replicate in the background")
parser.add_argument("--swap", action="store_true", help="restore(swap=True); wait_refill() before writing")
parser.add_argument("--fail-read", action="store_true",
                    help="a replacement's read of its copy stops half-way (test hook): it then comes as messages")
parser.add_argument("--no-close", action="store_true", help="end without snap.close() (dpmpi closes it at exit)")
args = parser.parse_args()

comm = dpmpi.init()
preloaded = "dpmpi.runtime" in sys.modules  # (a spare imports it before it waits; this program never does)
wid = MPI.COMM_WORLD.Get_rank()


def log(event, **fields):
    print(json.dumps({"event": event, "wid": wid, "rank": comm.Get_rank(), "time": time.time(), **fields}), flush=True)


def expected(rank, epoch):
    return snapstate.expected(args.mib, rank, epoch)


state = {k: v.copy() for k, v in expected(comm.Get_rank(), 0).items()}
snap = dpmpi.Snapshot(comm, state, replicas=args.replicas, threads=args.threads, persist_dir=args.persist)
log("active", role=comm.role.value, locked=snap.locked, preloaded=preloaded)


def restore():
    """The epoch to go on from, or None when the snapshot is lost."""
    fields = lambda: dict(role=comm.role.value, repair=comm.repairs)  # noqa: E731
    return snapstate.restore(snap, state, args.mib, comm.Get_rank, log, fields, swap=args.swap)


if args.fail_read and comm.role is dpmpi.Role.RECOVERED:
    snap._inject_copy_failure(0, pull=True)
epoch = restore() if comm.role is dpmpi.Role.RECOVERED else 1
while epoch is not None and epoch <= args.epochs:
    try:
        if args.swap:
            snap.wait_refill()
        for name, value in expected(comm.Get_rank(), epoch).items():
            state[name][...] = value
        if args.sync:
            snap.wait()
        snap.stage(epoch) if args.auto else snap.stage()
        dpmpi.faults.point("staged")
        snap.commit(epoch, durable=not args.overlap)
        if args.sync:
            snap.wait()
        dpmpi.faults.point("committed")
        total = comm.allreduce(epoch)  # the application's own traffic
        assert total == epoch * comm.Get_size(), total
        epoch += 1
    except (dpmpi.ProcFailedError, dpmpi.RevokedError) as exc:
        log("caught", epoch=epoch, error=type(exc).__name__)
        comm.Respawn()
        epoch = restore()
        dpmpi.faults.point("restored")
if epoch is not None:
    log("done", epoch=snap.epoch, role=comm.role.value, digest=digest(state),
        want=digest(expected(comm.Get_rank(), args.epochs)))
if not args.no_close:
    snap.close()
