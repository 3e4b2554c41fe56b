"""``dpmpi-bench scale``: the repair and restore phases from 2 to 32 ranks (or --ranks), a cost
model fitted to them (dpmpi/bench/model.py) and its predictions at 512 and 4096 ranks, next to the
published ULFM scaling results.

Each job: n active ranks + 1 spare, dpmpi.Runtime over --state-mib per rank (the first value),
rank 1 SIGKILLed at step 4 (dpmpi/bench/recovery_rank.py). Then, at the smallest n >= 2 of the
sweep, one job per further state size: the restore's transfer against the bytes (a bandwidth).
On one machine the processes outnumber the cores from n + 1 > cores on: the JSON says so
(``oversubscribed``), and the model separates that term from the log2(n) one."""
from __future__ import annotations

import os
import statistics

from dpmpi.bench import model
from dpmpi.bench.common import BenchError, Context, Progress, machine
from dpmpi.bench.restore import phases, recovery_job

KEYS = ("detect_ms", "repair_ms", "restore_ms", "resume_ms", "recompute_ms")


def median_row(rows: list[dict]) -> dict:
    """The median of each figure over repeated jobs (pure)."""
    out = {k: round(statistics.median(r[k] for r in rows), 3) for k in KEYS}
    for group in ("repair_phases_ms", "restore_phases_ms"):
        out[group] = {p: round(statistics.median(r[group][p] for r in rows), 3) for p in rows[0][group]}
    out["state_bytes"] = rows[0]["state_bytes"]
    return out


def run(ctx: Context, o) -> dict:
    """o: ranks (list of active counts), state_mib (list: the first for the n sweep), repeats,
    link_gbs, timeout."""
    ranks = sorted(set(o.ranks))
    if ranks[0] < 2:
        raise BenchError("scale: --ranks >= 2 (the victim is rank 1)")
    sizes = o.state_mib
    cores = os.cpu_count() or 1
    progress = Progress("scale", o.repeats * (len(ranks) + len(sizes) - 1))
    by_n: dict[str, dict] = {}
    failures = []
    for n in ranks:
        rows = []
        for _ in range(o.repeats):
            job = recovery_job(ctx, n, sizes[0], timeout=o.timeout)
            if "error" in job:
                failures.append({"n": n, "why": job["error"][-600:]})
                progress.step(f"{n}+1 ranks: FAILED")
                continue
            rows.append(phases(job))
            r = rows[-1]
            progress.step(f"{n}+1 ranks ({(n + 1) / cores:.1f} processes per core): detect {r['detect_ms']:.1f}, "
                          f"repair {r['repair_ms']:.1f}, restore {r['restore_ms']:.1f} ms")
        if rows:
            by_n[str(n)] = {"n": n, "processes_per_core": round((n + 1) / cores, 2),
                            "oversubscribed": (n + 1) > cores, **median_row(rows), "runs": rows}
    by_size: dict[str, dict] = {}
    if str(ranks[0]) in by_n:
        by_size[f"{sizes[0]:g}"] = {k: v for k, v in by_n[str(ranks[0])].items() if k != "runs"}
    for mib in sizes[1:]:
        rows = []
        for _ in range(o.repeats):
            job = recovery_job(ctx, ranks[0], mib, timeout=o.timeout)
            if "error" in job:
                failures.append({"n": ranks[0], "state_mib": mib, "why": job["error"][-600:]})
                progress.step(f"{ranks[0]}+1 ranks, {mib:g} MiB: FAILED")
                continue
            rows.append(phases(job))
            transfer = rows[-1]["restore_phases_ms"]["transfer"]
            progress.step(f"{ranks[0]}+1 ranks, {mib:g} MiB: transfer {transfer:.1f} ms")
        if rows:
            by_size[f"{mib:g}"] = {"n": ranks[0], **median_row(rows)}
    result = {"bench": "scale", "machine": machine(ctx.launcher, ranks[-1] + 1), "cores": cores,
              "note": (f"measured on one machine with {cores} cores: from {cores} processes on (n active + 1 spare) "
                       "the ranks are oversubscribed and every phase also grows with the processes per core"
                       if not ctx.launcher.placed() else "placement given by the user (see machine.launcher)"),
              "state_mib": sizes[0], "by_ranks": by_n, "by_state_mib": by_size, "failures": failures}
    usable = [dict(v, n=v["n"]) for v in by_n.values()]
    if len(usable) >= 2 and len(by_size) >= 2:
        result["model"] = model.fit_all(usable, cores if not ctx.launcher.placed() else 10 ** 9,
                                        list(by_size.values()), link_gbs=o.link_gbs)
    else:
        result["model"] = None
        result["model_skipped"] = "needs 2 or more values of --ranks and of --state-mib that ran"
    result["published"] = model.PUBLISHED
    return result


def summary(result: dict) -> list[str]:
    out = [result["note"]]
    for n, r in result["by_ranks"].items():
        out.append(f"{n:>4}+1 ranks: detect {r['detect_ms']:.1f} ms, repair {r['repair_ms']:.1f} ms "
                   f"(shrink {r['repair_phases_ms']['shrink']:.1f}, agree {r['repair_phases_ms']['agree']:.1f}), "
                   f"restore {r['restore_ms']:.1f} ms")
    m = result.get("model")
    if m:
        for n, p in m["predictions"].items():
            out.append(f"model at {n} ranks (one per core): shrink {p['shrink']} ms, agreement {p['agreement']} ms, "
                       f"total {p['total']} ms (transfer at {m['link_gbs']} GB/s)")
    return out
