"""A 1-D heat stencil on dpmpi's primitives alone: ``dpmpi.init()``, ``comm.Respawn()`` and
``dpmpi.Snapshot`` (no ``Runtime``). The recovery loop is written out by hand.

    dpmpi-run -n 6 --spares 2 -- python examples/primitives.py --steps 200
    DPMPI_FAULTS=1:step@50:KILL dpmpi-run -n 5 --spares 1 -- python examples/primitives.py

Every rank holds a block of a 1-D rod (plus one halo cell each side), exchanges halos with its
neighbours (Sendrecv), relaxes, and agrees on the rod's maximum with an Allreduce (MAX: exact in
any order) that feeds back into the next step. Every ``--snapshot-every`` steps the state is
staged and committed (epoch = steps done). On a failure the survivors ``Respawn()``, everyone
(the replacement too) ``restore()``s the newest common epoch and goes on from there; a failure
inside ``restore()`` or ``commit()`` repairs again, and a barrier after the last step keeps a rank
from ending while a peer is missing (as ``dpmpi.Runtime`` does). Every step is a deterministic function of
(state, step, rank), so a run with failures ends bit for bit where a failure-free run ends.

``--model mlp`` or ``--model jacobi`` runs the Runtime examples' models (examples/workloads.py,
the same math bit for bit) through this hand-written loop instead of the rod; ``--replicas R``
keeps each rank's snapshot on R buddies (any R failures in a row are survivable).

Output, mirroring the Runtime examples (one JSON line each, on stdout): ``step`` lines with
``--progress``, ``restored`` after each restore, and one ``final`` line per rank with its
``digest`` (sha256 of its arrays, 16 hex digits), as examples/workloads.py's ``finish`` prints.
"""
import argparse
import hashlib
import json
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import dpmpi  # noqa: E402  (first, before mpi4py.MPI)
import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=100)
parser.add_argument("--cells", type=int, default=1 << 16, help="cells per rank (default 65536: 0.5 MiB)")
parser.add_argument("--snapshot-every", type=int, default=5, help="commit a snapshot every K steps (default 5)")
parser.add_argument("--step-ms", type=float, default=0.0, help="extra compute time per step, ms (default 0)")
parser.add_argument("--progress", action="store_true", help="print a JSON line per step")
parser.add_argument("--model", choices=("rod", "mlp", "jacobi"), default="rod",
                    help="rod: the 1-D stencil above (default); mlp, jacobi: examples/workloads.py's models")
parser.add_argument("--state-mib", type=float, default=1.0, help="state per rank for mlp/jacobi, MiB (default 1)")
parser.add_argument("--replicas", type=int, default=1, help="buddies holding each snapshot (default 1)")
args = parser.parse_args()
if args.steps < 0 or args.cells < 2 or args.snapshot_every < 1 or args.state_mib <= 0 or args.replicas < 1:
    parser.error("--steps >= 0, --cells >= 2, --snapshot-every >= 1, --state-mib > 0, --replicas >= 1")

FAILURES = (dpmpi.ProcFailedError, dpmpi.RevokedError)


def report(event: dict) -> None:
    sys.stdout.write(json.dumps({"time": time.time(), **event}) + "\n")  # (one write: workloads.report)
    sys.stdout.flush()


def digest(arrays: dict) -> str:
    h = hashlib.sha256()
    for name in sorted(arrays):
        h.update(name.encode())
        h.update(np.ascontiguousarray(arrays[name]).tobytes())
    return h.hexdigest()[:16]


comm = dpmpi.init()  # a spare waits in here and comes out as the rank it replaces (RECOVERED)
wid = MPI.COMM_WORLD.Get_rank()
rank = comm.Get_rank()
if args.model == "rod":
    # the state: this rank's cells with a halo cell at each end, and the rod's maximum so far
    u = np.zeros(args.cells + 2)
    u[1:-1] = np.random.default_rng([11, rank]).random(args.cells)
    peak = np.zeros(1)
    state = {"u": u, "peak": peak}
else:
    import contextlib

    from workloads import MLP, Jacobi  # the Runtime examples' models (this script's directory)

    model = MLP(args.state_mib, batch=32) if args.model == "mlp" else Jacobi(args.state_mib, comm.Get_size(), n=256)
    state = model.initial_state() if args.model == "mlp" else model.initial_state(rank)
    peak = np.zeros(1)  # reported by --progress only
snap = dpmpi.Snapshot(comm, state, replicas=args.replicas)
restores = []


def step(k: int) -> None:
    dpmpi.faults.point("step")  # where DPMPI_FAULTS=RANK:step@N:KILL strikes
    if args.model != "rod":
        peak[0] = model.step(comm, state, k, contextlib.nullcontext)
        if args.step_ms:
            time.sleep(args.step_ms / 1000.0)
        return
    r, n = comm.Get_rank(), comm.Get_size()
    left = r - 1 if r > 0 else MPI.PROC_NULL
    right = r + 1 if r < n - 1 else MPI.PROC_NULL
    comm.Sendrecv(u[1:2], dest=left, sendtag=1, recvbuf=u[-1:], source=right, recvtag=1)
    comm.Sendrecv(u[-2:-1], dest=right, sendtag=2, recvbuf=u[0:1], source=left, recvtag=2)
    if args.step_ms:
        time.sleep(args.step_ms / 1000.0)  # stands for compute (deterministic: no effect on the state)
    new = 0.5 * u[1:-1] + 0.25 * (u[:-2] + u[2:])
    new += 1e-3 * np.sin(k + 0.1 * r) * peak[0]
    local = np.array([float(np.max(new))])
    comm.Allreduce(local, peak, op=MPI.MAX)  # exact whatever the order: same bits on every run
    u[1:-1] = new


def recover(repair: bool, k: int) -> int:
    """Repair (unless this process is a replacement that was just called in) and restore the
    newest epoch held for every rank; a failure during any of it repairs again. Returns the epoch.
    ``k``: the step this rank was at (-1: its first commit had not returned; then its arrays still
    hold the state it built, as a replacement's do: restore() returns -1 if no rank's epoch 0
    survived, and epoch 0 is committed again)."""
    while True:
        try:
            if repair:
                comm.Respawn()
            repair = True
            epoch = snap.restore(carry=k, as_built=k < 0)
            if epoch < 0:  # a rank died before its first commit completed: nothing to restore yet
                snap.stage()
                snap.commit(0)
                epoch = 0
        except FAILURES:
            continue
        restores.append(epoch)
        report({"event": "restored", "rank": comm.Get_rank(), "wid": wid, "epoch": epoch,
                "role": comm.role.value, "repair": comm.repairs})
        return epoch


if comm.role is dpmpi.Role.RECOVERED:
    k = recover(repair=False, k=-1)  # (a replacement built its arrays for its rank: as built)
else:
    try:
        snap.stage()
        snap.commit(0)  # epoch 0: the initial state, so that a failure in step 0 has something to restore
        k = 0
    except FAILURES:
        k = recover(repair=True, k=-1)

while True:
    try:
        while k < args.steps:
            step(k)
            k += 1
            if args.progress:
                report({"event": "step", "rank": comm.Get_rank(), "step": k - 1, "peak": float(peak[0])})
            if k % args.snapshot_every == 0 or k == args.steps:
                snap.stage()
                snap.commit(k)  # the last step's state is a committed epoch too
        # no rank leaves while another is missing: a peer that died after the last collective
        # (in its last restore's or commit's own part) fails this for the others, who repair and
        # restore the final epoch; without it they ended, and its result was lost (seen in chaos)
        comm.Barrier()
        break
    except FAILURES:
        k = recover(repair=True, k=k)

report({"event": "final", "rank": comm.Get_rank(), "wid": wid, "step": k, "digest": digest(state),
        "role": comm.role.value, "repairs": comm.repairs, "restored": restores})
