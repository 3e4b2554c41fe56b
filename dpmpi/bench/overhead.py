"""``dpmpi-bench overhead``: the failure-free overhead of dpmpi.Runtime's snapshots against the
snapshot interval, beside the work a failure is expected to lose at that interval: the trade-off
a user picks ``snapshot_every`` from.

One dpmpi-run job per workload (dpmpi/bench/overhead_rank.py): blocks of steps with snapshots
every K steps (each K of --intervals) and none, interleaved, several rounds after a warm-up
round, so every configuration sees the same machine; also a plain numpy copy of the state and a
synchronous snapshot of it. Workloads: the CPU-bound MLP, the Jacobi stencil, and ``accel``, a
step whose compute leaves the CPU idle (a GIL-released wait standing in for accelerator work).

Expected lost work per failure at interval K (a failure at a uniformly random moment, bounded
loss, dpmpi's default): the steps since the last snapshot, (K - 1)/2 on average, plus the half of
the step in progress: K/2 steps, times the step time at that interval."""
from __future__ import annotations

import json
import os

from dpmpi.bench.common import PY, Context, error_tail, machine, Progress, run_job


def expected_lost_ms(k: int, step_ms: float) -> float:
    """The work a failure loses on average with a snapshot every k steps (pure)."""
    return k / 2 * step_ms


def run(ctx: Context, o) -> dict:
    """o: workloads, state_mib (the first), intervals, rounds, block, ranks (the first), timeout."""
    n = o.ranks[0]
    mib = o.state_mib[0]
    progress = Progress("overhead", len(o.workloads))
    result = {"bench": "overhead", "machine": machine(ctx.launcher, n), "ranks": n, "state_mib": mib,
              "intervals": o.intervals, "workloads": {}, "failed": {}}
    for w in o.workloads:
        if w not in ("mlp", "jacobi", "accel"):
            from dpmpi.bench.common import BenchError

            raise BenchError(f"overhead: unknown workload {w!r} (mlp, jacobi, accel)")
        part = os.path.join(ctx.tmp, f"overhead-{w}.json")
        program = [PY, "-m", "dpmpi.bench.overhead_rank", "--examples", str(ctx.root / "examples"), "--workload", w,
                   "--state-mib", f"{mib:g}", "--out", part, "--rounds", str(o.rounds), "--block", str(o.block),
                   "--intervals", ",".join(map(str, o.intervals))]
        ran = run_job(ctx.launcher.dpmpi_run(n, 0, program), ctx.env(), ctx.tmp, o.timeout)
        if ran is None or ran[0] != 0 or not os.path.exists(part):
            result["failed"][w] = "hang" if ran is None else error_tail(ran[2])
            progress.step(f"{w}: FAILED")
            continue
        with open(part) as f:
            ov = json.load(f)
        for k, r in ov["by_snapshot_every"].items():
            r["expected_lost_ms"] = round(expected_lost_ms(int(k), r["step_ms"]), 3)
        result["workloads"][w] = ov
        rows = ov["by_snapshot_every"]
        progress.step(f"{w}: " + ", ".join(f"every {k}: {r['overhead_pct']}%" for k, r in rows.items() if k != "0"))
    result["ok"] = not result["failed"]
    return result


def summary(result: dict) -> list[str]:
    out = []
    for w, ov in result["workloads"].items():
        out.append(f"{w} ({ov['state_mib']} MiB/rank; plain copy {ov['copy_ms']} ms, synchronous snapshot "
                   f"{ov['sync_snapshot_ms']} ms):")
        for k, r in ov["by_snapshot_every"].items():
            out.append(f"  every {k:>2}: {r['step_ms']} ms/step, overhead {r['overhead_pct']}%, per snapshot "
                       f"{r['extra_ms_per_snapshot']} ms = {r['extra_per_snapshot_vs_copy']}x the plain copy, hidden "
                       f"{r['hidden_fraction']}; expected lost work per failure {r['expected_lost_ms']} ms")
    return out
