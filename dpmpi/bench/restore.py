"""``dpmpi-bench restore``: restore speed into arrays whose pages were never written vs arrays
written before, per state size; and the recovery job that ``scale`` uses too.

Each job: dpmpi-run -n A+1 --spares 1 (A active ranks + a cold spare), dpmpi.Runtime over one
array of --state-mib (or --arrays N equal arrays of that many MiB in all) made with np.zeros
(dpmpi/bench/recovery_rank.py); "touched": every element written once before the run;
"untouched": never written except one element per step. Rank 1 is killed at step 4; the spare
replaces it and every rank restores. Reported: the restore's "copy" phase (the snapshot written
back into the arrays) per rank, median over the repeats, per variant, and the ratio untouched /
touched (1.0: restore at memory speed whatever the arrays); with several --arrays, each split's
restore (from the last rank's repair, the cold spare's Runtime made, to the last rank restored:
``phases``) against one array's of the same bytes.
Before dpmpi pre-faulted registered arrays this copy took 433-543 ms into untouched 64 MiB
arrays against 28 ms into touched ones (issue 13)."""
from __future__ import annotations

import statistics

from dpmpi.bench.common import PY, Context, error_tail, fault_records, json_lines, machine, Progress, run_job

REPAIR_PHASES = ("revoke", "shrink", "reassign", "rebuild", "agree")
RESTORE_PHASES = ("quiesce", "agree", "transfer", "verify", "copy", "rereplicate_post")


def recovery_job(ctx: Context, n_active: int, state_mib: float, touched: int = 1, victim: int = 1,
                 timeout: float = 300, arrays: int = 1) -> dict:
    """One job with one kill at step 4; {"error": ...} or the ranks' final records and the kill."""
    program = [PY, "-m", "dpmpi.bench.recovery_rank", "--state-mib", str(state_mib), "--touched", str(touched),
               "--arrays", str(arrays)]
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
    """o: state_mib (list), arrays (list: the state split into that many equal arrays), repeats,
    ranks (the first: active ranks, default 2)."""
    n_active = o.ranks[0]
    progress = Progress("restore", 2 * o.repeats * len(o.state_mib) * len(o.arrays))
    by_size = {}
    for mib in o.state_mib:
        for arrays in o.arrays:
            by_size[key(mib, arrays)] = _point(ctx, o, n_active, mib, arrays, progress)
        for arrays in o.arrays:  # the same bytes in many arrays against one array, same run
            if arrays != 1 and key(mib, 1) in by_size:
                one, many = by_size[key(mib, 1)]["summary"], by_size[key(mib, arrays)]["summary"]
                by_size[key(mib, arrays)]["vs_one_array"] = {
                    v: round(many[v]["restore_ms_median"] / max(one[v]["restore_ms_median"], 1e-3), 3)
                    for v in ("untouched", "touched")}
    return {"bench": "restore", "machine": machine(ctx.launcher, n_active + 1), "active": n_active,
            "by_state_mib": by_size}


def key(mib: float, arrays: int) -> str:
    """A point's key in "by_state_mib": its MiB per rank, and "xN" for a state in N arrays."""
    return f"{mib:g}" if arrays == 1 else f"{mib:g}x{arrays}"


def _point(ctx: Context, o, n_active: int, mib: float, arrays: int, progress: Progress) -> dict:
    runs: dict[str, list] = {"untouched": [], "touched": []}
    timeline: dict[str, list] = {"untouched": [], "touched": []}  # phases(): restore_ms, resume_ms
    for _ in range(o.repeats):  # interleaved, so both variants see the same machine
        for name, touched in (("untouched", 0), ("touched", 1)):
            job = recovery_job(ctx, n_active, mib, touched, arrays=arrays)
            if "error" in job:
                raise RuntimeError(f"restore: job failed ({mib} MiB in {arrays} array(s), {name}): {job['error']}")
            recs = [{"rank": f["rank"], "role": f["role"], "restore": r["restore"]}
                    for f in job["finals"] for r in f["recoveries"]]
            runs[name].append(recs)
            timeline[name].append(phases(job))
            progress.step(f"{mib:g} MiB in {arrays} array(s) {name}: copy "
                          + ", ".join(f"{r['restore']['ms']['copy']:.1f}" for r in recs) + " ms")
    summary = {}
    for name, jobs in runs.items():
        copy = [r["restore"]["ms"]["copy"] for job in jobs for r in job]
        total = [r["restore"]["total_ms"] for job in jobs for r in job]
        summary[name] = {"copy_ms_median": round(statistics.median(copy), 1), "copy_ms_max": round(max(copy), 1),
                         "restore_total_ms_median": round(statistics.median(total), 1), "n": len(copy),
                         **{f"{p}_median": round(statistics.median(t[p] for t in timeline[name]), 1)
                            for p in ("restore_ms", "resume_ms")}}
    ratio = summary["untouched"]["copy_ms_median"] / max(summary["touched"]["copy_ms_median"], 1e-3)
    return {"state_mib": mib, "arrays": arrays, "summary": summary, "ratio_copy": round(ratio, 3), "runs": runs}


def summary(result: dict) -> list[str]:
    out = []
    for r in result["by_state_mib"].values():
        s, arrays = r["summary"], r.get("arrays", 1)
        where = f"{r['state_mib']:g} MiB per rank" + (f" in {arrays} arrays" if arrays != 1 else "")
        out.append(f"{where}: restore copy median {s['untouched']['copy_ms_median']} ms into untouched "
                   f"arrays, {s['touched']['copy_ms_median']} ms into touched ones (ratio {r['ratio_copy']:.2f})"
                   + ("" if "vs_one_array" not in r else
                      f"; restore {r['summary']['touched']['restore_ms_median']} ms, "
                      f"{r['vs_one_array']['touched']:.2f}x one array's (touched)"))
    return out
