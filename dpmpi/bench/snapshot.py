"""``dpmpi-bench snapshot``: snapshot throughput, replication, restore, and how much compute a
snapshot leaves. Every figure is a ratio against a baseline measured in the same run, interleaved
with it (the machine is noisy):

1. stage+commit (one process, no replication) against ``numpy.copyto`` of the same bytes into a
   buffer that was already written once (no page faults), for 1 and 2 copy threads;
2. replication on a 2-rank job (each rank's slot to the other and back, plus the barrier)
   against a plain ``Sendrecv`` of the same bytes between the same two ranks;
3. restore (no failure: verify the checksum and copy back) time;
4. a numpy compute loop on rank 0 of the 2-rank job, alone and while snapshots are staged,
   committed and replicated back to back (rank 1 is the replication partner and does not
   compute, so the loop shares the machine only with the snapshot's own work).
Parts 2 and 4: dpmpi/bench/snapshot_rank.py."""
from __future__ import annotations

import json
import os
import time

from dpmpi.bench.common import PY, Context, Progress, machine, run_job

def run(ctx: Context, o) -> dict:
    """o: sizes, repl_sizes, repeats, compute_mib, timeout."""
    progress = Progress("snapshot", 2)
    # the one-process part in its own process: an MPI singleton here would leave its environment
    # to the jobs that follow
    part = os.path.join(ctx.tmp, "snapshot-local.json")
    cmd = [PY, "-m", "dpmpi.bench.snapshot_rank", part, "--local", ",".join(map(str, o.sizes)), "--reps",
           str(o.repeats)]
    ran = run_job(cmd, ctx.env(), ctx.tmp, o.timeout)
    if ran is None or ran[0] != 0 or not os.path.exists(part):
        raise RuntimeError("snapshot: the one-process part failed: " + (ran[2][-2000:] if ran else "hang"))
    with open(part) as f:
        local = json.load(f)
    progress.step("one process: stage+commit vs numpy.copyto\n" + ran[1].rstrip())
    part = os.path.join(ctx.tmp, "snapshot-mpi.json")
    program = [PY, "-m", "dpmpi.bench.snapshot_rank", part, "--repl-sizes", ",".join(map(str, o.repl_sizes)),
               "--reps", str(o.repeats), "--compute-mib", str(o.compute_mib)]
    # one BLAS thread: the compute loop is one rank's work on one core, as in an MPI job
    env = ctx.env(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    ran = run_job(ctx.launcher.dpmpi_run(2, 0, program), env, ctx.tmp, o.timeout)
    if ran is None or ran[0] != 0 or not os.path.exists(part):
        raise RuntimeError("snapshot: the 2-rank part failed: " + (ran[2][-2000:] if ran else "hang"))
    with open(part) as f:
        mpi = json.load(f)
    os.unlink(part)
    progress.step("2-rank part: replication and compute overlap")
    ov = mpi["overlap"]
    return {"bench": "snapshot", "machine": machine(ctx.launcher, 2), "time": time.time(), "stage_commit": local, **mpi,
            "targets": {
                "one_thread_ge_0.9x_copyto": all(r["threads1"]["ratio_vs_copyto"] >= 0.9 for r in local),
                # None: no size of 64 MiB or more was measured
                "two_threads_ge_1.5x_one_from_64MiB":
                    all(r["two_vs_one_thread"] >= 1.5 for r in local if r["mib"] >= 64)
                    if any(r["mib"] >= 64 for r in local) else None,
                "replication_ge_0.8x_sendrecv": all(r["ratio_vs_sendrecv"] >= 0.8 for r in mpi["replication"]),
                "compute_keeps_ge_80pct": ov["fraction_kept"] >= 0.8}}


def summary(result: dict) -> list[str]:
    out = []
    for r in result["replication"]:
        out.append(f"{r['mib']:5d} MiB  replication {r['replication_gbs']:6.2f} GB/s vs Sendrecv "
                   f"{r['sendrecv_gbs']:6.2f} GB/s ({r['ratio_vs_sendrecv']:.2f}x)")
    o = result["overlap"]
    out.append(f"compute loop while a {o['state_mib']} MiB snapshot is copied and replicated ({o['window_ms']} ms): "
               f"{o['fraction_kept']:.1%} of its speed alone ({o['loop_rate_with_snapshots']} vs "
               f"{o['loop_rate_alone']} it/s); the computing thread had the CPU "
               f"{o['main_thread_cpu_fraction']:.1%} of that time")
    out.append("targets: " + json.dumps(result["targets"]))
    return out
