"""``dpmpi-bench restore``: restore speed into arrays whose pages were never written vs arrays
written before, per state size; and the recovery job that ``scale`` uses too.

Each job: dpmpi-run -n A+1 --spares 1 (A active ranks + a cold spare), dpmpi.Runtime over one
array of --state-mib made with np.zeros (dpmpi/bench/recovery_rank.py); "touched": every element
written once before the run; "untouched": never written except one element per step. Rank 1 is
killed at step 4; the spare replaces it and every rank restores. Reported: the restore's "copy"
phase (the snapshot written back into the arrays) per rank, median over the repeats, per
variant, and the ratio untouched / touched (1.0: restore at memory speed whatever the arrays).
Before dpmpi pre-faulted registered arrays this copy took 433-543 ms into untouched 64 MiB
arrays against 28 ms into touched ones (issue 13)."""
from __future__ import annotations

import statistics

from dpmpi.bench.common import PY, Context, error_tail, fault_records, json_lines, machine, Progress, run_job

REPAIR_PHASES = ("revoke", "shrink", "reassign", "rebuild", "agree")
RESTORE_PHASES = ("quiesce", "agree", "transfer", "verify", "copy", "rereplicate_post")


def recovery_job(ctx: Context, n_active: int, state_mib: float, touched: int = 1, victim: int = 1,
                 timeout: float = 300) -> dict:
    """One job with one kill at step 4; {"error": ...} or the ranks' final records and the kill."""
    program = [PY, "-m", "dpmpi.bench.recovery_rank", "--state-mib", str(state_mib), "--touched", str(touched)]
    env = ctx.env(DPMPI_FAULTS=f"{victim}:step@4:KILL")
    ran = run_job(ctx.launcher.dpmpi_run(n_active + 1, 1, program), env, ctx.tmp, timeout)
    if ran is None:
        return {"error": "hang"}
    rc, out, err = ran
    finals = [e for e in json_lines(out) if e.get("event") == "final"]
    kills = fault_records(err)
    if rc != 0 or len(finals) != n_active or not kills:
        return {"error": f"exit {rc}, {len(finals)} of {n_active} ranks reported: " + error_tail(err)}
    return {"finals": finals, "kill": kills[0]["time"]}


def phases(job: dict) -> dict:
    """Kill -> resumed, per phase, from one recovery job's records (pure). detect: kill -> the last
    survivor caught it; repair: -> Respawn done everywhere; restore: -> every rank restored;
    resume: kill -> every rank stepping again; recompute: -> every rank back at the failed step;
    the repair's and the restore's own phases (the slowest rank's); bytes: one rank's state
    (None when the program does not say)."""
    t = job["kill"]
    recs = [r for f in job["finals"] for r in f["recoveries"]]
    old = [r for r in recs if r["error"]]  # survivors (the replacement caught nothing)
    caught = max(r["caught_at"] for r in old)
    repaired = max(r["repaired_at"] for r in recs)
    restored = max(r["restored_at"] for r in recs)
    resumed = max(r["resumed_at"] for r in recs)
    caught_up = max((r["caught_up_at"] or r["resumed_at"]) for r in recs)
    return {
        "detect_ms": 1e3 * (caught - t), "repair_ms": 1e3 * (repaired - caught),
        "restore_ms": 1e3 * (restored - repaired), "resume_ms": 1e3 * (resumed - t),
        "recompute_ms": 1e3 * (caught_up - resumed),
        "repair_phases_ms": {p: max(r["repair"].get("phases_ms", {}).get(p, 0.0) for r in old) for p in REPAIR_PHASES},
        "restore_phases_ms": {p: max(r["restore"].get("ms", {}).get(p, 0.0) for r in recs) for p in RESTORE_PHASES},
        "state_bytes": job["finals"][0].get("state_bytes"),
    }


def run(ctx: Context, o) -> dict:
    """o: state_mib (list), repeats, ranks (the first: active ranks, default 2)."""
    n_active = o.ranks[0]
    progress = Progress("restore", 2 * o.repeats * len(o.state_mib))
    by_size = {}
    for mib in o.state_mib:
        runs: dict[str, list] = {"untouched": [], "touched": []}
        for _ in range(o.repeats):  # interleaved, so both variants see the same machine
            for name, touched in (("untouched", 0), ("touched", 1)):
                job = recovery_job(ctx, n_active, mib, touched)
                if "error" in job:
                    raise RuntimeError(f"restore: job failed ({mib} MiB, {name}): {job['error']}")
                recs = [{"rank": f["rank"], "role": f["role"], "restore": r["restore"]}
                        for f in job["finals"] for r in f["recoveries"]]
                runs[name].append(recs)
                progress.step(f"{mib:g} MiB {name}: copy " + ", ".join(f"{r['restore']['ms']['copy']:.1f}"
                                                                          for r in recs) + " ms")
        summary = {}
        for name, jobs in runs.items():
            copy = [r["restore"]["ms"]["copy"] for job in jobs for r in job]
            total = [r["restore"]["total_ms"] for job in jobs for r in job]
            summary[name] = {"copy_ms_median": round(statistics.median(copy), 1), "copy_ms_max": round(max(copy), 1),
                             "restore_total_ms_median": round(statistics.median(total), 1), "n": len(copy)}
        ratio = summary["untouched"]["copy_ms_median"] / max(summary["touched"]["copy_ms_median"], 1e-3)
        by_size[f"{mib:g}"] = {"state_mib": mib, "summary": summary, "ratio_copy": round(ratio, 3), "runs": runs}
    return {"bench": "restore", "machine": machine(ctx.launcher, n_active + 1), "active": n_active,
            "by_state_mib": by_size}


def summary(result: dict) -> list[str]:
    out = []
    for key, r in result["by_state_mib"].items():
        s = r["summary"]
        out.append(f"{key} MiB per rank: restore copy median {s['untouched']['copy_ms_median']} ms into untouched "
                   f"arrays, {s['touched']['copy_ms_median']} ms into touched ones (ratio {r['ratio_copy']:.2f})")
    return out
