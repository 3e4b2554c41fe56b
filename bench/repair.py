"""Hot-swap repair time: kill -> repaired, the moment every rank of the new active
communicator holds it, for a spare taking the failed rank's place.

    python bench/repair.py [--kills 20] [--configs 4+1,8+2] [--respawn-configs 4,8] [--out bench/results/repair.json]

Each kill is one dpmpi-run job of tests/programs/hotswap.py: the active ranks loop an
Allreduce, one (in turn) is SIGKILLed at iteration 50, the survivors call Respawn(), a spare
comes in. The kill time is the victim's own timestamp just before it dies; repair events come
from DPMPI_EVENTS (one JSON line per process per repair, with the phase times). Also measures
the CPU an idle spare uses (a fault-free job of a few seconds): cpu time / wall time.
The respawn path: no spares, policy "respawn": a process started with Comm.Spawn takes the place.
"""
import argparse
import json
import os
import pathlib
import platform
import statistics
import sys
import tempfile
import time

from _jobs import run_job

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "tests" / "programs" / "hotswap.py"


def one_job(n_active: int, spares: int, faults: str, iters: int, timeout: float,
            policy: str = "shrink") -> tuple[int, list, list, str]:
    with tempfile.TemporaryDirectory() as tmp:
        events_path = os.path.join(tmp, "events.jsonl")
        env = dict(os.environ, DPMPI_EVENTS=events_path, DPMPI_ON_DEPLETED=policy)
        if faults:
            env["DPMPI_FAULTS"] = faults
        cmd = [sys.executable, "-m", "dpmpi.run", "-n", str(n_active + spares), "--spares", str(spares), "--",
               sys.executable, str(PROGRAM), "--iters", str(iters)]
        ran = run_job(cmd, env, tmp, timeout)
        if ran is None:
            return -999, [], [], "hang"
        returncode, out, err = ran
        events = [json.loads(x) for x in open(events_path)] if os.path.exists(events_path) else []
        kills = [json.loads(x.split(" ", 1)[1]) for x in err.splitlines() if x.startswith("[dpmpi-fault]")]
        done = [json.loads(x) for x in out.splitlines() if x.startswith('{"event": "done"')]
        ok = returncode == 0 and len(done) == n_active and all(d["size"] == n_active for d in done)
        return (0 if ok else 1), events, kills, err[-1500:]


def stats(values: list[float]) -> dict:
    if not values:
        return {}
    return {"median": round(statistics.median(values), 2), "max": round(max(values), 2), "n": len(values)}


def bench_config(n_active: int, spares: int, kills: int, timeout: float, policy: str = "shrink") -> dict:
    rows, failures = [], []
    for k in range(kills):
        victim = k % n_active
        rc, events, fired, err = one_job(n_active, spares, f"{victim}:iteration@51:KILL", 200, timeout, policy)
        repairs = [e for e in events if e["event"] == "repair" and e["rank"] >= 0]
        if rc != 0 or not fired or len(repairs) != n_active:
            failures.append({"kill": k, "victim": victim, "why": err})
            print(f"  {n_active}+{spares} kill {k + 1:2d}: FAILED", flush=True)
            continue
        t_kill = fired[0]["time"]
        old = [e for e in repairs if e["process_id"] < n_active + spares]  # a respawned process detects nothing
        phases = sorted({p for e in old for p in e["phases_ms"]})
        row = {
            "victim": victim,
            "kill_to_detected_ms": 1e3 * (max(e["detected_at"] for e in old) - t_kill),
            "kill_to_repaired_ms": 1e3 * (max(e["repaired_at"] for e in repairs) - t_kill),
            "respawn_call_ms_max": max(e["total_ms"] for e in repairs),
            "attempts": max(e["attempts"] for e in repairs),
            "phases_ms_max": {p: max(e["phases_ms"].get(p, 0.0) for e in old) for p in phases},
        }
        rows.append(row)
        print(f"  {n_active}+{spares} kill {k + 1:2d}: victim {victim}, detected {row['kill_to_detected_ms']:.1f} ms, "
              f"repaired {row['kill_to_repaired_ms']:.1f} ms", flush=True)
    phases = rows[0]["phases_ms_max"].keys() if rows else []
    return {
        "ranks": f"{n_active}+{spares}",
        "policy": policy,
        "kills": kills,
        "ok": len(rows),
        "failures": failures,
        "kill_to_detected_ms": stats([r["kill_to_detected_ms"] for r in rows]),
        "kill_to_repaired_ms": stats([r["kill_to_repaired_ms"] for r in rows]),
        "respawn_call_ms": stats([r["respawn_call_ms_max"] for r in rows]),
        "phases_ms": {p: stats([r["phases_ms_max"][p] for r in rows]) for p in phases},
        "rows": rows,
    }


def idle_spare_cpu(n_active: int, spares: int, iters: int, timeout: float) -> dict:
    rc, events, _k, err = one_job(n_active, spares, "", iters, timeout)
    exits = [e for e in events if e["event"] == "spare-exit"]
    return {"ranks": f"{n_active}+{spares}", "ok": rc == 0 and len(exits) == spares,
            "cpu_fraction": [e["cpu_fraction"] for e in exits], "idle_s": [e["idle_s"] for e in exits]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--configs", default="4+1,8+2")
    p.add_argument("--respawn-configs", default="4,8", help="active ranks, no spares, policy 'respawn' ('' to skip)")
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--idle-iters", type=int, default=200000, help="iterations of the fault-free job timing the spare")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "repair.json"))
    a = p.parse_args()
    try:
        configs = [tuple(int(x) for x in c.split("+")) for c in a.configs.split(",")]
        assert all(len(c) == 2 and c[0] >= 2 and c[1] >= 1 for c in configs) and a.kills >= 1
    except (ValueError, AssertionError):
        p.error("--configs is a list like 4+1,8+2 (actives >= 2, spares >= 1); --kills >= 1")
    t0 = time.time()
    result = {"bench": "repair", "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
              "spare_path": [], "idle_spare": [],
              "respawn_path": []}
    for n_active, spares in configs:
        print(f"{n_active} active + {spares} spare(s), {a.kills} kills", flush=True)
        result["spare_path"].append(bench_config(n_active, spares, a.kills, a.timeout))
        result["idle_spare"].append(idle_spare_cpu(n_active, spares, a.idle_iters, a.timeout))
    for n_active in [int(x) for x in a.respawn_configs.split(",") if x]:
        print(f"{n_active} active, no spare, policy respawn, {a.kills} kills", flush=True)
        result["respawn_path"].append(bench_config(n_active, 0, a.kills, a.timeout, "respawn"))
    result["wall_s"] = round(time.time() - t0, 1)
    out = pathlib.Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    for c in result["spare_path"] + result["respawn_path"]:
        print(json.dumps({k: c[k] for k in ("ranks", "policy", "ok", "kill_to_detected_ms", "kill_to_repaired_ms",
                                            "respawn_call_ms", "phases_ms")}))
    print(json.dumps(result["idle_spare"]))
    print(f"written to {out}")
    return 0 if all(c["ok"] == a.kills for c in result["spare_path"] + result["respawn_path"]) else 1


if __name__ == "__main__":
    sys.exit(main())
