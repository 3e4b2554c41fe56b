"""``dpmpi-bench repair``: hot-swap repair time, kill -> repaired (the moment every rank of the new
active communicator holds it), for a spare taking the failed rank's place, per phase.

Each kill is one dpmpi-run job of tests/programs/hotswap.py: the active ranks loop an Allreduce,
one (in turn) is SIGKILLed at iteration 50, the survivors call Respawn(), a spare comes in. The
kill time is the victim's own timestamp just before it dies; repair events come from
DPMPI_EVENTS (one JSON line per process per repair, with the phase times). Also: the CPU an idle
spare uses (a failure-free job: cpu time / wall time), and the respawn path (no spares, policy
"respawn": a process started with Comm.Spawn takes the place)."""
from __future__ import annotations

import json
import os

from dpmpi.bench.common import (
    PY, BenchError, Context, error_tail, fault_records, json_lines, machine, Progress, run_job, stats,
)


def one_job(ctx: Context, n_active: int, spares: int, faults: str, iters: int, timeout: float,
            policy: str = "shrink") -> tuple[int, list, list, str]:
    events_path = os.path.join(ctx.tmp, "repair-events.jsonl")
    if os.path.exists(events_path):
        os.unlink(events_path)
    env = ctx.env(DPMPI_EVENTS=events_path, DPMPI_ON_DEPLETED=policy)
    if faults:
        env["DPMPI_FAULTS"] = faults
    program = [str(ctx.root / "tests" / "programs" / "hotswap.py"), "--iters", str(iters)]
    ran = run_job(ctx.launcher.dpmpi_run(n_active + spares, spares, [PY, *program]), env, ctx.tmp, timeout)
    if ran is None:
        return -999, [], [], "hang"
    returncode, out, err = ran
    events = json_lines(open(events_path).read()) if os.path.exists(events_path) else []
    done = [e for e in json_lines(out) if e.get("event") == "done"]
    ok = returncode == 0 and len(done) == n_active and all(d["size"] == n_active for d in done)
    return (0 if ok else 1), events, fault_records(err), error_tail(err)


def measure(rows_events: list[dict], fired: list[dict], n_active: int, spares: int) -> dict:
    """One kill's figures from the repair events and the victim's fault record (pure)."""
    repairs = [e for e in rows_events if e["event"] == "repair" and e["rank"] >= 0]
    t_kill = fired[0]["time"]
    old = [e for e in repairs if e["process_id"] < n_active + spares]  # a respawned process detects nothing
    phases = sorted({p for e in old for p in e["phases_ms"]})
    return {
        "kill_to_detected_ms": 1e3 * (max(e["detected_at"] for e in old) - t_kill),
        "kill_to_repaired_ms": 1e3 * (max(e["repaired_at"] for e in repairs) - t_kill),
        "respawn_call_ms_max": max(e["total_ms"] for e in repairs),
        "attempts": max(e["attempts"] for e in repairs),
        "phases_ms_max": {p: max(e["phases_ms"].get(p, 0.0) for e in old) for p in phases},
    }


def bench_config(ctx: Context, n_active: int, spares: int, kills: int, timeout: float, progress: Progress,
                 policy: str = "shrink") -> dict:
    rows, failures = [], []
    for k in range(kills):
        victim = k % n_active
        rc, events, fired, err = one_job(ctx, n_active, spares, f"{victim}:iteration@51:KILL", 200, timeout, policy)
        repairs = [e for e in events if e["event"] == "repair" and e["rank"] >= 0]
        if rc != 0 or not fired or len(repairs) != n_active:
            failures.append({"kill": k, "victim": victim, "why": err})
            progress.step(f"{n_active}+{spares} {policy} kill {k + 1}: FAILED")
            continue
        row = {"victim": victim, **measure(events, fired, n_active, spares)}
        rows.append(row)
        progress.step(f"{n_active}+{spares} {policy} kill {k + 1}: victim {victim}, detected "
                      f"{row['kill_to_detected_ms']:.1f} ms, repaired {row['kill_to_repaired_ms']:.1f} ms")
    phases = rows[0]["phases_ms_max"].keys() if rows else []
    return {
        "ranks": f"{n_active}+{spares}", "active": n_active, "spares": spares, "policy": policy, "kills": kills,
        "ok": len(rows), "failures": failures,
        "kill_to_detected_ms": stats([r["kill_to_detected_ms"] for r in rows]),
        "kill_to_repaired_ms": stats([r["kill_to_repaired_ms"] for r in rows]),
        "respawn_call_ms": stats([r["respawn_call_ms_max"] for r in rows]),
        "phases_ms": {p: stats([r["phases_ms_max"][p] for r in rows]) for p in phases},
        "rows": rows,
    }


def idle_spare_cpu(ctx: Context, n_active: int, spares: int, iters: int, timeout: float) -> dict:
    rc, events, _k, err = one_job(ctx, n_active, spares, "", iters, timeout)
    exits = [e for e in events if e["event"] == "spare-exit"]
    return {"ranks": f"{n_active}+{spares}", "ok": rc == 0 and len(exits) == spares,
            "cpu_fraction": [e["cpu_fraction"] for e in exits], "idle_s": [e["idle_s"] for e in exits]}


def run(ctx: Context, o) -> dict:
    """o: ranks (active counts), spares (per configuration), kills, respawn_ranks, idle_iters, timeout."""
    configs = [(n, o.spares) for n in o.ranks]
    for n, s in configs:
        if n < 2 or s < 1:
            raise BenchError(f"repair: --ranks >= 2 and --spares >= 1 (got {n}+{s})")
    total = o.kills * (len(configs) + len(o.respawn_ranks)) + len(configs)
    progress = Progress("repair", total)
    result = {"bench": "repair", "machine": machine(ctx.launcher, max(n + s for n, s in configs)),
              "spare_path": [], "idle_spare": [], "respawn_path": []}
    for n_active, spares in configs:
        result["spare_path"].append(bench_config(ctx, n_active, spares, o.kills, o.timeout, progress))
        result["idle_spare"].append(idle_spare_cpu(ctx, n_active, spares, o.idle_iters, o.timeout))
        progress.step(f"{n_active}+{spares} idle spare CPU: {result['idle_spare'][-1]['cpu_fraction']}")
    for n_active in o.respawn_ranks:
        result["respawn_path"].append(bench_config(ctx, n_active, 0, o.kills, o.timeout, progress, "respawn"))
    result["ok"] = all(c["ok"] == o.kills for c in result["spare_path"] + result["respawn_path"])
    return result


def summary(result: dict) -> list[str]:
    lines = []
    for c in result["spare_path"] + result["respawn_path"]:
        lines.append(json.dumps({k: c[k] for k in ("ranks", "policy", "ok", "kill_to_detected_ms",
                                                   "kill_to_repaired_ms", "respawn_call_ms", "phases_ms")}))
    lines.append(json.dumps(result["idle_spare"]))
    return lines
