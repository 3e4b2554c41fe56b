"""Failure-free overhead of dpmpi.Runtime snapshots: the rank program of ``dpmpi-bench overhead``
(run under dpmpi-run; not a user example).

For each K of --intervals, one dpmpi.Runtime snapshotting every K steps: its blocks of steps in
rotation with blocks without dpmpi (the baseline), several rounds, on the same state, so that
both see the same machine; each step's wall time is recorded.
Rank 0 writes a JSON file. Also measured in the same run: a plain numpy copy of the state (the
unavoidable cost of copying the bytes), and a synchronous stage + commit + replication of it.
"""
import argparse
import contextlib
import json
import statistics
import sys
import time

import numpy as np

import dpmpi
from mpi4py import MPI

parser = argparse.ArgumentParser()
parser.add_argument("--examples", required=True, help="the checkout's examples/ (its workloads module)")
parser.add_argument("--intervals", default="1,2,5,10", help="snapshot every K steps, for each K")
parser.add_argument("--workload", choices=["mlp", "jacobi", "accel"], default="mlp")
parser.add_argument("--state-mib", type=float, default=64)
parser.add_argument("--batch", type=int, default=64)
parser.add_argument("--accel-ms", type=float, default=50.0, help="accel: the GIL-released wait per step")
parser.add_argument("--block", type=int, default=10, help="steps per block")
parser.add_argument("--rounds", type=int, default=3)
parser.add_argument("--out", required=True)
args = parser.parse_args()
sys.path.insert(0, args.examples)
from workloads import MLP, Jacobi  # noqa: E402

comm = dpmpi.init()
rank, size = comm.Get_rank(), comm.Get_size()
if args.workload == "jacobi":
    model = Jacobi(args.state_mib, size)
    state = model.initial_state(rank)
else:
    model = MLP(args.state_mib, args.batch)
    state = model.initial_state()


def accel_step(comm, state, k, update):
    """A step whose compute leaves the CPU idle (a GIL-released wait standing in for accelerator
    work), a small Allreduce, and an update that changes the state in place (cheaply: on an
    accelerator the update runs there too); the snapshot still copies the whole state."""
    time.sleep(args.accel_ms / 1e3)
    norm = np.array([float(k)])
    comm.Allreduce(MPI.IN_PLACE, norm, op=MPI.SUM)
    with update():
        for a in state.values():
            a[k % a.shape[0]] += norm[0]


step_impl = accel_step if args.workload == "accel" else model.step
configs = [0, *[int(k) for k in args.intervals.split(",")]]
times: dict[int, list[float]] = {k: [] for k in configs}
raw = comm.mpi  # (the baseline's steps go to MPI straight: between two runs dpmpi would record them)
base = 0  # baseline steps done

# one Runtime at a time (runs of two cannot alternate: runtime_checks.no_alternation), its blocks
# in rotation with blocks of the baseline, several rounds, so that both see the same machine
for k in configs[1:]:
    rt, done = dpmpi.Runtime(comm, state, snapshot_every=k), 0
    for _round in range(args.rounds + 1):  # round 0 warms up (and commits the runtime's epoch 0)
        for which in (0, k):
            raw.Barrier()
            t0 = time.perf_counter()
            if which == 0:
                for i in range(args.block):
                    step_impl(raw, state, base + i, contextlib.nullcontext)
                base += args.block
            else:
                first = []

                def timed(i, rt=rt, first=first):
                    if not first:
                        first.append(time.perf_counter())
                    step_impl(comm, state, i, rt.update)
                rt.run(timed, done + args.block, commit_at_end=False)
                done += args.block
                t0 = first[0]  # (not the snapshot of the state a run starts from, taken per rt.run call
                # as the baseline changed the arrays: a run boundary's cost, bench/run_boundary.py)
            if _round:  # per step, the whole block: the last snapshot's commit and replication included
                times[which].append((time.perf_counter() - t0) / args.block)
    rt.close()  # (its memory, before the next one's)

# the cost of the bytes, measured here: a plain copy, and a synchronous snapshot (copy + replicate)
nbytes = sum(a.nbytes for a in state.values())
dst = {n: np.empty_like(a) for n, a in state.items()}
for n in state:
    np.copyto(dst[n], state[n])
copy_t, snap_t = [], []
probe = dpmpi.Snapshot(comm, state)
for e in range(5):
    t = time.perf_counter()
    for n in state:
        np.copyto(dst[n], state[n])
    copy_t.append(time.perf_counter() - t)
    comm.Barrier()
    t = time.perf_counter()
    probe.stage()
    probe.commit(e)
    probe.wait()
    snap_t.append(time.perf_counter() - t)
probe.close()

med = {k: statistics.median(v) for k, v in times.items()}
gathered = comm.gather({"med": med, "copy": statistics.median(copy_t), "snap": statistics.median(snap_t)}, root=0)
if rank == 0:
    step0 = statistics.median(g["med"][0] for g in gathered)
    copy_s = statistics.median(g["copy"] for g in gathered)
    snap_s = statistics.median(g["snap"] for g in gathered)
    rows = {}
    for k in configs:
        stepk = statistics.median(g["med"][k] for g in gathered)
        extra = stepk - step0
        rows[k] = {"step_ms": round(1e3 * stepk, 3), "overhead_pct": round(100 * extra / step0, 2),
                   "extra_ms_per_step": round(1e3 * extra, 3),
                   # per snapshot: K steps share one
                   "extra_ms_per_snapshot": round(1e3 * extra * k, 3) if k else 0.0,
                   "hidden_fraction": round(1 - extra * k / snap_s, 3) if k else None,
                   "extra_per_snapshot_vs_copy": round(extra * k / copy_s, 3) if k else None}
    with open(args.out, "w") as f:
        json.dump({"workload": args.workload, "state_mib": round(nbytes / 2**20, 1), "ranks": size,
                   "steps_per_config": min(len(v) for v in times.values()), "copy_ms": round(1e3 * copy_s, 3),
                   "sync_snapshot_ms": round(1e3 * snap_s, 3), "by_snapshot_every": rows}, f)
