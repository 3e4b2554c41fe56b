"""``dpmpi-bench e2e``: end-to-end figures of dpmpi on the example workloads (examples/train_mlp.py,
jacobi.py), per workload and state size, against what a user has today.

1. Time to resume (dpmpi, A active + 1 spare, snapshot every step): one dpmpi-run job per kill,
   rank (cycling 0..A-1) SIGKILLed at the start of a step (or, with ``--kill-at``, that fraction
   of the step later, the fractions taken in turn); from the kill to the moment every
   rank is stepping again from the restored epoch, with its breakdown (detect: the last survivor
   caught the failure; repair: Respawn done everywhere; restore: every rank restored), and the
   work lost (whole steps recomputed, and the time to get back to the failed step).
2. The baseline: the plain mpi4py twin (examples/*_mpi4py.py) with disk checkpoints every K
   steps (K = 10 and K = 1), one rank SIGKILLed at the same point, mpirun tears the job down,
   this driver relaunches it, it reloads the newest checkpoint and recomputes to the failed step.
   Kill -> relaunched and reloaded (lost work excluded), and kill -> caught up (included).

Workloads: ``mlp-batchB`` (the MLP, batch size B: a short or a long step), ``jacobi`` (the
stencil) and ``accelMS`` (an accelerator-like step: the MLP at batch 16 after a GIL-released wait
of MS milliseconds, ``time.sleep``, standing in for a kernel the CPU waits on). The failure-free
overhead is ``dpmpi-bench overhead``."""
from __future__ import annotations

import os
import statistics
import tempfile
import time

from dpmpi.bench.common import (
    PY, BenchError, Context, error_tail, fault_records, json_lines, machine, med, Progress, run_job,
)
from dpmpi.bench.restore import phases


def workload(name: str, mib: float) -> tuple[str, list[str]]:
    """(script stem, its arguments) for a workload name (pure)."""
    if name == "jacobi":
        return "jacobi", ["--state-mib", f"{mib:g}"]
    if name.startswith("mlp-batch") and name[9:].isdigit():
        return "train_mlp", ["--state-mib", f"{mib:g}", "--batch", name[9:]]
    if name.startswith("accel") and name[5:].isdigit() and int(name[5:]) > 0:
        return "train_mlp", ["--state-mib", f"{mib:g}", "--batch", "16", "--wait-ms", name[5:]]
    raise BenchError(f"e2e: unknown workload {name!r} (mlp-batchB with B a batch size, accelMS with MS a "
                     f"GIL-released wait per step in ms, or jacobi)")


def dpmpi_kill(ctx: Context, script: str, args: list[str], n_active: int, victim: int, step: int, steps: int,
               timeout: float, delay: float = 0.0) -> dict:
    after = f"+{delay:.4f}" if delay > 0 else ""  # seconds into the step
    env = ctx.env(DPMPI_FAULTS=f"{victim}:step@{step + 1}{after}:KILL")
    program = [PY, str(ctx.root / "examples" / f"{script}.py"), "--steps", str(steps), *args]
    ran = run_job(ctx.launcher.dpmpi_run(n_active + 1, 1, program), env, ctx.tmp, timeout)
    if ran is None or ran[0] != 0:
        return {"error": "hang" if ran is None else error_tail(ran[2])}
    rc, out, err = ran
    kill = fault_records(err)
    finals = [e for e in json_lines(out) if e.get("event") == "final"]
    recs = [r for f in finals for r in f["recoveries"]]
    if not kill or len(finals) != n_active or not recs:
        return {"error": "incomplete run"}
    ph = phases({"kill": kill[0]["time"], "finals": finals})
    phases_ms = {k: ph[k] for k in ("resume_ms", "detect_ms", "repair_ms", "restore_ms", "recompute_ms")}
    return {"victim": victim, "step": step, "delay_ms": round(1e3 * delay, 1), **phases_ms,
            "steps_recomputed": max(r["steps_recomputed"] for r in recs),
            "caught_up_ms": ph["resume_ms"] + ph["recompute_ms"]}


def baseline_kill(ctx: Context, script: str, args: list[str], n: int, victim: int, step: int, steps: int, every: int,
                  tmp: str, timeout: float) -> dict:
    ckpt = os.path.join(tmp, "ckpt")
    cmd = ctx.launcher.mpirun(n, [PY, str(ctx.root / "examples" / f"{script}_mpi4py.py"), "--steps", str(steps),
                                  *args, "--progress", "--checkpoint-dir", ckpt, "--checkpoint-every", str(every)])
    first = run_job([*cmd, "--kill-rank", str(victim), "--kill-step", str(step)], ctx.env(), tmp, timeout)
    if first is None:
        return {"error": "hang"}
    kill = [e for e in json_lines(first[1]) if e.get("event") == "kill"]
    if not kill:
        return {"error": "no kill: " + first[2][-800:]}
    t = kill[0]["time"]
    relaunch_at = time.time()  # mpirun has torn the job down: the driver relaunches at once
    second = run_job(cmd, ctx.env(), tmp, timeout)
    if second is None or second[0] != 0:
        return {"error": "relaunch failed"}
    ev = json_lines(second[1])
    resumed = [e for e in ev if e.get("event") == "resumed"]
    start = resumed[0]["step"]
    reloaded = max(e["time"] for e in resumed)
    back = [e["time"] for e in ev if e.get("event") == "step" and e["step"] == step - 1]
    caught_up = max(back) if back else reloaded  # the end of step - 1 is the start of step
    return {"victim": victim, "step": step, "every": every, "teardown_ms": 1e3 * (relaunch_at - t),
            "reloaded_ms": 1e3 * (reloaded - t), "steps_recomputed": step - start,
            "recompute_ms": 1e3 * (caught_up - reloaded), "caught_up_ms": 1e3 * (caught_up - t)}


def summarize(rows: list[dict], keys: list[str]) -> dict:
    good = [r for r in rows if "error" not in r]
    out = {k: med([r[k] for r in good]) for k in keys}
    out.update(n=len(good), failed=len(rows) - len(good), mean_steps_recomputed=round(
        statistics.mean(r["steps_recomputed"] for r in good), 2) if good else None)
    return out


def step_ms(ctx: Context, script: str, args: list[str], n: int, timeout: float) -> float | None:
    """Step time of the plain mpi4py twin (n ranks, no snapshots)."""
    cmd = ctx.launcher.mpirun(n, [PY, str(ctx.root / "examples" / f"{script}_mpi4py.py"), "--steps", "10", *args,
                                  "--progress"])
    ran = run_job(cmd, ctx.env(), ctx.tmp, timeout)
    if ran is None or ran[0] != 0:
        return None
    st = sorted(e["time"] for e in json_lines(ran[1]) if e.get("event") == "step" and e["rank"] == 0)
    return round(1e3 * (st[-1] - st[2]) / (len(st) - 3), 1) if len(st) > 4 else None


def one_workload(ctx: Context, o, script: str, args: list[str], n: int, progress: Progress, label: str) -> dict:
    res = {"step_ms": step_ms(ctx, script, args, n, o.timeout)}
    progress.step(f"{label}: {res['step_ms']} ms per step (plain mpi4py twin, {n} ranks)")
    rows = []
    fractions = getattr(o, "kill_at", None) or [0.0]
    for f in fractions:
        if not 0.0 <= f < 1.0:
            raise BenchError(f"e2e: --kill-at takes fractions of a step in [0, 1), got {f}")
    for i in range(o.kills):
        delay = fractions[i % len(fractions)] * (res["step_ms"] or 0.0) / 1e3
        rows.append(dpmpi_kill(ctx, script, args, n, i % n, 12 + (i % 5), 30, o.timeout, delay))
        r = rows[-1]
        head = f"{label} dpmpi kill {i} (+{1e3 * delay:.0f} ms into the step): "
        progress.step(head + (r["error"][:200] if "error" in r else
                      f"resume {r['resume_ms']:.1f} ms (detect {r['detect_ms']:.1f}, repair {r['repair_ms']:.1f}, "
                      f"restore {r['restore_ms']:.1f}), {r['steps_recomputed']} step(s) recomputed, "
                      f"back where it failed after {r['caught_up_ms']:.1f} ms"))
    res["dpmpi"] = summarize(rows, ["resume_ms", "detect_ms", "repair_ms", "restore_ms", "recompute_ms",
                                    "caught_up_ms", "steps_recomputed"])
    res["dpmpi_runs"] = rows
    res["baseline"] = {}
    for every in (10, 1):
        brows = []
        for i in range(o.baseline_kills):
            step = 20 + (5 + 7 * i) % 10 if every == 10 else 12 + (i % 5)  # 25, 22, 29, 26, 23, ...
            with tempfile.TemporaryDirectory(dir=ctx.tmp) as sub:
                brows.append(baseline_kill(ctx, script, args, n, i % n, step, step + 2, every, sub, o.timeout))
            b = brows[-1]
            progress.step(f"{label} relaunch (checkpoint every {every}) kill {i}: " + (
                b["error"][:200] if "error" in b else f"relaunched and reloaded {b['reloaded_ms']:.0f} ms, caught up "
                                                      f"{b['caught_up_ms']:.0f} ms"))
        res["baseline"][f"every{every}"] = summarize(brows, ["teardown_ms", "reloaded_ms", "recompute_ms",
                                                             "caught_up_ms", "steps_recomputed"])
        res["baseline"][f"every{every}_runs"] = brows
    d, b10, b1 = res["dpmpi"], res["baseline"]["every10"], res["baseline"]["every1"]
    if d["resume_ms"] and b10["reloaded_ms"]:
        res["resume_speedup_vs_relaunch"] = round(b10["reloaded_ms"] / d["resume_ms"], 1)
        res["caught_up_speedup_vs_every10"] = round(b10["caught_up_ms"] / d["caught_up_ms"], 1)
        if b1["caught_up_ms"]:
            res["caught_up_speedup_vs_every1"] = round(b1["caught_up_ms"] / d["caught_up_ms"], 1)
    return res


def run(ctx: Context, o) -> dict:
    """o: workloads, state_mib (list), kills, baseline_kills, ranks (the first: active ranks), timeout."""
    n = o.ranks[0]
    plan = [(w, mib, *workload(w, mib)) for mib in o.state_mib for w in o.workloads]
    progress = Progress("e2e", len(plan) * (1 + o.kills + 2 * o.baseline_kills))
    result = {"bench": "e2e", "machine": machine(ctx.launcher, n + 1), "time": time.time(), "active": n,
              "state_mib": o.state_mib, "workloads": {}}
    for w, mib, script, args in plan:
        name = f"{w}-{mib:g}MiB"
        result["workloads"][name] = {"workload": w, "state_mib": mib,
                                     **one_workload(ctx, o, script, args, n, progress, name)}
    return result


def summary(result: dict) -> list[str]:
    out = []
    for name, r in result["workloads"].items():
        d = r["dpmpi"]
        out.append(f"{name}: step {r['step_ms']} ms; dpmpi: time to resume {d['resume_ms']} ms "
                   f"(detect {d['detect_ms']}, "
                   f"repair {d['repair_ms']}, restore {d['restore_ms']}), kill -> caught up {d['caught_up_ms']} ms")
        for k in ("every10", "every1"):
            b = r["baseline"][k]
            out.append(f"    relaunch ({k}): relaunched and reloaded {b['reloaded_ms']} ms, steps recomputed "
                       f"{b['mean_steps_recomputed']} on average, kill -> caught up {b['caught_up_ms']} ms")
    return out
