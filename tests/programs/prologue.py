"""A Runtime program whose prologue (before its first snapshot) uses collectives, as programs
that start every rank from rank 0's weights do: Bcast of the initial state, bcast of a config,
allreduce, allgather, Barrier, a Scatter and a scatter of each rank's part from rank 0, a gather
of names and a reduce to rank 0. Exact integer arithmetic, so each rank checks its final state
against the failure-free result computed locally. ``--refuse``: the prologue also passes a
token around a ring, received from ``MPI.ANY_SOURCE`` (which a replacement cannot get again: the
order in which the failed rank matched its senders died with it). ``--fresh``: each run
after the first is the first run of a new ``dpmpi.Runtime`` over the same array, made before
the evaluation that precedes it (the earlier ones are kept, not closed).

One JSON line per rank at the end: {"event": "final", "rank", "role", "ok", "prologue_ok", ...}."""
import argparse
import json
import sys

import numpy as np

import dpmpi
from mpi4py import MPI

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=60)
p.add_argument("--refuse", action="store_true")
p.add_argument("--epochs", type=int, default=1, help="rt.run calls, an allreduce of a metric after each")
p.add_argument("--every", type=int, default=1, help="snapshot_every")
p.add_argument("--fresh", action="store_true", help="a new Runtime for each run after the first")
p.add_argument("--eval-gather", action="store_true", help="after each run, also a Gather (buffers) to rank 0")
p.add_argument("--eval-refuse", action="store_true", help="after each run's allreduce, a sendrecv from "
               "ANY_SOURCE (which a "
               "replacement cannot redo)")
p.add_argument("--eval-split", action="store_true", help="after each run, a Split of comm (by parity) that "
               "the next run's steps use, rebound each time")
p.add_argument("--lazy", action="store_true", help="a Split of comm made in the first step and kept (its "
               "colour and key are rank 0's of --eval-split's too)")
a = p.parse_args()

N, MOD = 4096, 1_000_003
comm = dpmpi.init()
r, n = comm.Get_rank(), comm.Get_size()
w = np.random.default_rng(11).integers(0, MOD, N) if r == 0 else np.zeros(N, dtype=np.int64)
comm.Bcast(w, root=0)  # every rank starts from rank 0's weights
cfg = comm.bcast({"mod": MOD, "scale": 3} if r == 0 else None, root=0)
ranks = comm.allgather(r)
total = comm.allreduce(r + 1)
comm.Barrier()
part = np.empty(8, dtype=np.int64)  # each rank's part of rank 0's data
comm.Scatter(7 * np.arange(8 * n, dtype=np.int64) if r == 0 else None, part, root=0)
seed = comm.scatter([100 + q for q in range(n)] if r == 0 else None, root=0)
names = comm.gather(f"rank{r}", root=0)
rows = comm.reduce(1000 + r, op=MPI.MAX, root=0)
if a.refuse:
    token = comm.sendrecv(r, dest=(r + 1) % n, source=MPI.ANY_SOURCE)
w0 = w.copy()
rt = dpmpi.Runtime(comm, {"w": w}, snapshot_every=a.every)


def update(v, k, nranks):
    """One step's gradient sum over every rank (exact in int64) and update."""
    g = sum((v * (q + 1) + k) % 1000 for q in range(nranks))
    return (v + cfg["scale"] * g) % cfg["mod"]


def step(k):
    dpmpi.faults.point("step")
    k += base  # (--fresh: a new Runtime's steps count from 0)
    g = (w * (r + 1) + k) % 1000
    comm.Allreduce(MPI.IN_PLACE, g)
    global lazy
    if ev is not None:  # (--eval-split: the halves made after the last run; nothing the state depends on)
        assert ev.allreduce(1) == ev.Get_size()
    if a.lazy and lazy is None:
        lazy = comm.Split(r // 2, r)
    if lazy is not None:
        assert lazy.allreduce(r) == sum(q for q in range(n) if q // 2 == r // 2)
    with rt.update():
        w[...] = (w + cfg["scale"] * g) % cfg["mod"]


metrics, base, runtimes, ev, lazy = [], 0, [rt], None, None
for e in range(1, a.epochs + 1):  # (commit_at_end: each run ends with a commit and a barrier)
    rt = runtimes[-1]
    base = (e - 1) * a.steps // a.epochs if a.fresh else 0
    rt.run(step, e * a.steps // a.epochs - base)
    if a.fresh and e < a.epochs:  # the next phase's Runtime, made before this evaluation
        runtimes.append(dpmpi.Runtime(comm, {"w": w}, snapshot_every=a.every))
    dpmpi.faults.point("eval")  # (tests: a death between two runs)
    if a.eval_gather:
        comm.Gather(np.array([e], dtype=np.int64), np.zeros(comm.Get_size(), dtype=np.int64), root=0)
    if a.eval_split:
        ev = comm.Split(comm.Get_rank() % 2, 0)
    metrics.append(comm.allreduce(int(w.sum() % 1000)))  # an "evaluation" between runs
    if a.eval_refuse:
        comm.sendrecv(e, dest=(comm.Get_rank() + 1) % comm.Get_size(), source=MPI.ANY_SOURCE)
expect, want = w0, []
for k in range(a.steps):
    expect = update(expect, k, n)
    if (k + 1) % (a.steps // a.epochs) == 0:
        want.append(n * int(expect.sum() % 1000))
prologue_ok = (cfg == {"mod": MOD, "scale": 3} and ranks == list(range(n)) and total == n * (n + 1) // 2
               and part.tolist() == [7 * (8 * r + i) for i in range(8)] and seed == 100 + r
               and names == ([f"rank{q}" for q in range(n)] if r == 0 else None)
               and rows == (1000 + n - 1 if r == 0 else None))
print(json.dumps({"event": "final", "rank": r, "role": comm.role.value, "ok": bool((w == expect).all() and metrics == want),
                  "prologue_ok": prologue_ok, "recoveries": sum(len(t.history) for t in runtimes)}), flush=True)
for t in runtimes:
    t.close()
sys.exit(0)
