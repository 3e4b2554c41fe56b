"""``dpmpi-bench watcher``: the failure watcher, how fast a death is noticed on the node, and what
it does to the time to resume of a long-step workload.

    dpmpi-bench watcher [--kills 8] [--resume-kills 8] [--step-ms 250] [--out DIR]

All jobs: tests/programs/watch_step.py under dpmpi-run, 3 active ranks + 1 warm spare (4
processes on this machine's 2 cores), dpmpi.Runtime with a snapshot every step; the step's work
is cut in 8 ticks (4 before the step's Allreduce, 4 in its update), and a fault ``tick@N``
SIGKILLs the victim before the N-th tick. Times are from the victim's fault record (written just
before it kills itself) to what the survivors' recovery records say.

1. Detection on the node (1 s sleep steps, the victim killed at the start of step 2's work, the
   survivors asleep): kill -> the watcher noticed, per survivor, through pidfds (the default),
   through ULFM's own detection alone (``DPMPI_WATCH_PIDFD=0 DPMPI_WATCH_ULFM=1``, the receive
   on the watcher's communicator tested every 10 ms, and every 1 ms), and kill -> repaired
   (ULFM must know of the death before the shrink completes). Then the same with numpy steps
   (the survivors and the victim compute), pidfds only.
2. Time to resume, with and without the watcher (``DPMPI_WATCH=0``) in the same run, jobs
   interleaved: a ~250 ms step of sleep (an accelerator-like step) and of numpy, the kill at
   tick j of step 2 (j = 0..7 in turn: spread over the step), victims rank 0..2 in turn (at ticks
   4-7, in the update, the survivors act on the death at the update's end: docs/runtime.md).
   Kill -> every rank is stepping again (max resumed_at), with detect (the last survivor caught
   it) and repair.
3. What it costs with no failure: the watcher thread's CPU time in failure-free jobs (pidfds;
   ULFM at 10 ms and 1 ms), and, in one process, the added time of a dpmpi.Comm call and of arming
   a step.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import time

from dpmpi.bench.common import PY, Context, Progress, fault_records, json_lines, machine, med, mx, run_job

TICKS = 8


def job(ctx: Context, args, env, faults, steps):
    e = ctx.env(**env)
    if faults:
        e["DPMPI_FAULTS"] = faults
    program = [PY, str(ctx.root / "tests" / "programs" / "watch_step.py"), "--steps", str(steps), *args]
    ran = run_job(ctx.launcher.dpmpi_run(4, 1, program), e, ctx.tmp, 300)
    if ran is None:
        return {"error": "hang"}
    rc, out, err = ran
    events = json_lines(out)  # (two ranks' lines run together by the launcher's forwarding are skipped)
    finals = {e["rank"]: e for e in events if e["event"] == "final"}
    if rc != 0 or len(finals) != 3:
        return {"error": f"rc {rc}: " + err[-800:]}
    kills = [k["time"] for k in fault_records(err)]
    steps_s = [e["t1"] - e["t0"] for e in events if e["event"] == "step"]
    return {"finals": finals, "kill": kills[0] if kills else None, "step_s": med(steps_s)}


def detection(ctx, progress, n, args, env, label):
    rows = []
    for i in range(n):
        victim = i % 3
        r = job(ctx, args, env, f"{victim}:tick@{2 * TICKS + 1}:KILL", 4)
        if "error" in r:
            rows.append({"error": r["error"]})
            progress.step(f"{label} kill {i}: {r['error'][:300]}")
            continue
        t = r["kill"]
        for rank, f in r["finals"].items():
            for rec in f["recoveries"]:
                if not rec["error"]:
                    continue  # the replacement
                rows.append({"victim": victim, "rank": rank, "by": rec["detected_by"],
                             "noticed_ms": 1e3 * (rec["noticed_at"] - t) if rec["noticed_at"] else None,
                             "caught_ms": 1e3 * (rec["caught_at"] - t), "repaired_ms": 1e3 * (rec["repaired_at"] - t)})
        progress.step(f"{label} kill {i}: " + ", ".join(f"{x['by']} {x['noticed_ms'] and round(x['noticed_ms'], 1)} ms"
                                                  for x in rows[-2:] if "by" in x))
    good = [x for x in rows if "by" in x]
    by = {}
    for x in good:
        by[x["by"]] = by.get(x["by"], 0) + 1
    return {"noticed_ms": {"median": med([x["noticed_ms"] for x in good]), "max": mx([x["noticed_ms"] for x in good])},
            "caught_ms": {"median": med([x["caught_ms"] for x in good]), "max": mx([x["caught_ms"] for x in good])},
            "repaired_ms": {"median": med([x["repaired_ms"] for x in good]),
                            "max": mx([x["repaired_ms"] for x in good])},
            "noticed_by": by, "survivor_records": len(good), "failed_jobs": sum(1 for x in rows if "error" in x),
            "rows": rows}


def resume_row(r, victim, tick):
    t = r["kill"]
    recs = [(rank, rec) for rank, f in r["finals"].items() for rec in f["recoveries"]]
    if t is None or not recs:
        return {"error": "no recovery"}
    caught = max(rec["caught_at"] for _r, rec in recs if rec["error"])
    return {"victim": victim, "tick": tick, "step_s": r["step_s"],
            "resume_ms": 1e3 * (max(rec["resumed_at"] for _r, rec in recs) - t),
            "detect_ms": 1e3 * (caught - t),
            "repair_ms": 1e3 * (max(rec["repaired_at"] for _r, rec in recs) - caught),
            "by": sorted({rec["detected_by"] for _r, rec in recs if rec["error"]})}


def micro(tmp):
    """Per-call costs in one process (a singleton job), with and without the watcher."""
    code = r"""
import json, time, dpmpi
from dpmpi import interrupts
comm = dpmpi.init()
n = 200000
t = time.perf_counter()
for _ in range(n):
    comm.Get_rank()
call = (time.perf_counter() - t) / n
t = time.perf_counter()
for _ in range(n):
    with interrupts.armed():
        pass
arm = (time.perf_counter() - t) / n
print(json.dumps({"comm_call_ns": call * 1e9, "arm_ns": arm * 1e9}))
"""
    out = {}
    for label, env in (("watcher", {}), ("no_watcher", {"DPMPI_WATCH": "0"})):
        vals = []
        for _ in range(3):
            p = subprocess.run([PY, "-c", code], capture_output=True, text=True, cwd=tmp, timeout=120,
                               env=dict(os.environ, **env))  # one process: its own session's singleton
            vals.append(json.loads(p.stdout.strip().splitlines()[-1]))
        out[label] = {k: round(min(v[k] for v in vals), 1) for k in vals[0]}
    out["added_ns_per_comm_call"] = round(out["watcher"]["comm_call_ns"] - out["no_watcher"]["comm_call_ns"], 1)
    out["added_ns_per_step_armed"] = out["watcher"]["arm_ns"]
    return out


def run(ctx: Context, o) -> dict:
    """o: kills, resume_kills, step_ms."""
    progress = Progress("watcher", 4 * o.kills + 4 * o.resume_kills + 3)
    # numpy iterations for a step of --step-ms (measured alone here; under load steps run longer)
    import numpy as np

    x = np.linspace(0.0, 1.0, 2048)
    t = time.perf_counter()
    for _ in range(5000):
        x = np.sin(x) * 0.5 + 0.25
    iters = int(o.step_ms / 1e3 / ((time.perf_counter() - t) / 5000))
    result = {"bench": "watcher", "machine": machine(ctx.launcher, 4), "time": time.time(), "numpy_iters": iters}
    progress.note("1. detection on the node (1 s sleep steps)")
    sleep1 = ["--work", "sleep", "--seconds", "1"]
    det = {}
    modes = [("pidfd", {}), ("ulfm_10ms", {"DPMPI_WATCH_PIDFD": "0", "DPMPI_WATCH_ULFM": "1"}),
             ("ulfm_1ms", {"DPMPI_WATCH_PIDFD": "0", "DPMPI_WATCH_ULFM": "1", "DPMPI_WATCH_POLL": "0.001"})]
    for name, env in modes:
        det[name] = detection(ctx, progress, o.kills, sleep1, env, name)
    numpy1 = ["--work", "numpy", "--iters", str(4 * iters)]
    det["pidfd_numpy"] = detection(ctx, progress, o.kills, numpy1, {}, "pidfd, numpy steps")
    result["detection"] = det
    progress.note(f"2. time to resume, {o.step_ms:g} ms steps, kill spread over the step")
    work = {"sleep": ["--work", "sleep", "--seconds", str(o.step_ms / 1e3)],
            "numpy": ["--work", "numpy", "--iters", str(iters)]}
    resume = {f"{w}_{m}": [] for w in work for m in ("watcher", "no_watcher")}
    for i in range(o.resume_kills):
        victim, tick = i % 3, i % TICKS
        for w, args in work.items():
            for m, env in (("watcher", {}), ("no_watcher", {"DPMPI_WATCH": "0"})):
                r = job(ctx, args, env, f"{victim}:tick@{2 * TICKS + tick + 1}:KILL", 5)
                row = {"error": r["error"]} if "error" in r else resume_row(r, victim, tick)
                resume[f"{w}_{m}"].append(row)
                progress.step(f"{w} {m} kill {i} (tick {tick}): " + (
                    row["error"][:200] if "error" in row else f"resume {row['resume_ms']:.1f} ms, detect "
                                                              f"{row['detect_ms']:.1f}, step {row['step_s']} s"))
    summary_ = {}
    for k, rows in resume.items():
        good = [r for r in rows if "error" not in r]
        summary_[k] = {"resume_ms": med([r["resume_ms"] for r in good]),
                       "resume_max_ms": mx([r["resume_ms"] for r in good]),
                       "detect_ms": med([r["detect_ms"] for r in good]),
                       "repair_ms": med([r["repair_ms"] for r in good]),
                       "step_s": med([r["step_s"] for r in good]), "n": len(good), "failed": len(rows) - len(good)}
    for w in work:
        on, off = summary_[f"{w}_watcher"], summary_[f"{w}_no_watcher"]
        if on["resume_ms"] and off["resume_ms"]:
            summary_[f"{w}_ratio_without_over_with"] = round(off["resume_ms"] / on["resume_ms"], 2)
    result["resume"] = {"summary": summary_, "rows": resume}
    progress.note("3. cost without failures")
    cost = {}
    for name, env in modes:
        r = job(ctx, ["--work", "sleep", "--seconds", "1"], env, "", 6)
        progress.step(f"failure-free, {name}")
        if "error" in r:
            cost[name] = {"error": r["error"]}
            continue
        cpu = [f["watch"]["thread_cpu_s"] for f in r["finals"].values()]
        wall = 6 * 1.0
        cost[name] = {"thread_cpu_ms_per_rank": med([1e3 * c for c in cpu]),
                      "thread_cpu_pct_of_a_core": round(100 * statistics.median(cpu) / wall, 4),
                      "wakeups": med([f["watch"]["wakeups"] for f in r["finals"].values()]),
                      "mpi_tests": med([f["watch"]["tests"] for f in r["finals"].values()]), "job_steps_s": wall}
    cost["per_call"] = micro(ctx.tmp)
    result["cost"] = cost
    return result


def summary(result: dict) -> list[str]:
    out = []
    for name, d in result["detection"].items():
        out.append(f"{name}: kill -> noticed median {d['noticed_ms']['median']} ms (max {d['noticed_ms']['max']}), "
                   f"-> repaired median {d['repaired_ms']['median']} ms; by {d['noticed_by']}")
    s = result["resume"]["summary"]
    for w in ("sleep", "numpy"):
        on, off = s[f"{w}_watcher"], s[f"{w}_no_watcher"]
        out.append(f"{w}: time to resume median {on['resume_ms']} ms with the watcher (detect {on['detect_ms']}), "
                   f"{off['resume_ms']} ms without (detect {off['detect_ms']})")
    for name, c in result["cost"].items():
        out.append(f"cost, {name}: {c}")
    return out
