"""End-to-end figures of dpmpi on the two example workloads (examples/train_mlp.py, jacobi.py).

    python bench/e2e.py [--state-mib 64] [--kills 10] [--baseline-kills 5] [--out bench/results/e2e.json]

1. Time to resume (dpmpi, 4 active + 1 spare, snapshot every step): one dpmpi-run job per kill,
   rank (cycling 0..3) SIGKILLed at the start of a step; from the kill to the moment every rank
   is stepping again from the restored epoch, with its breakdown (detect: the last survivor
   caught the failure; repair: Respawn done everywhere; restore: every rank restored), and the
   work lost (whole steps recomputed, and the time to get back to the failed step).
2. The baseline a user has today: the plain mpi4py twin with disk checkpoints every K steps
   (K = 10 and K = 1), one rank SIGKILLed at the same point, mpirun tears the job down, this
   driver relaunches it, it reloads the newest checkpoint and recomputes to the failed step.
   Kill -> relaunched and reloaded (lost work excluded), and kill -> caught up (included).
3. Failure-free overhead: bench/_e2e_overhead.py (blocks of steps with snapshots every 1, 2, 5,
   10 steps and none, interleaved in one run), for the CPU-bound MLP, the Jacobi stencil, and a
   variant whose compute phase leaves the CPU idle (a GIL-released wait standing in for
   accelerator work).

The MLP runs at two step lengths (batch sizes), the Jacobi stencil at its own, and once more with
a small state for short steps (at 64 MiB per rank and 4 ranks on 2 cores, the gradient Allreduce
and the optimizer alone take ~100 ms a step here).
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
EXAMPLES = ROOT / "examples"
PY = sys.executable


def med(xs):
    xs = [x for x in xs if x is not None]
    return round(statistics.median(xs), 2) if xs else None


def events_of(out: str) -> list[dict]:
    return [json.loads(x) for x in out.splitlines() if x.startswith("{")]


def dpmpi_kill(script: str, args: list[str], victim: int, step: int, steps: int, tmp: str) -> dict | None:
    env = dict(os.environ, DPMPI_FAULTS=f"{victim}:step@{step + 1}:KILL")
    cmd = [PY, "-m", "dpmpi.run", "-n", "5", "--spares", "1", "--", PY, str(EXAMPLES / f"{script}.py"),
           "--steps", str(steps), *args]
    ran = run_job(cmd, env, tmp, 600)
    if ran is None or ran[0] != 0:
        return {"error": "hang" if ran is None else ran[2][-1500:]}
    rc, out, err = ran
    kill = [json.loads(x.split(" ", 1)[1]) for x in err.splitlines() if x.startswith("[dpmpi-fault]")]
    finals = [e for e in events_of(out) if e["event"] == "final"]
    recs = [r for f in finals for r in f["recoveries"]]
    if not kill or len(finals) != 4 or not recs:
        return {"error": "incomplete run"}
    t = kill[0]["time"]
    caught = max(r["caught_at"] for r in recs if r["error"])
    repaired = max(r["repaired_at"] for r in recs)
    restored = max(r["restored_at"] for r in recs)
    resumed = max(r["resumed_at"] for r in recs)
    caught_up = max(r["caught_up_at"] or r["resumed_at"] for r in recs)
    return {"victim": victim, "step": step, "resume_ms": 1e3 * (resumed - t), "detect_ms": 1e3 * (caught - t),
            "repair_ms": 1e3 * (repaired - caught), "restore_ms": 1e3 * (restored - repaired),
            "steps_recomputed": max(r["steps_recomputed"] for r in recs),
            "recompute_ms": 1e3 * (caught_up - resumed), "caught_up_ms": 1e3 * (caught_up - t)}


def mpirun_cmd() -> list[str]:
    return [str(pathlib.Path(PY).parent / "mpirun"), "--mca", "btl", "^ofi", "--oversubscribe", "--allow-run-as-root",
            "-n", "4"]


def baseline_kill(script: str, args: list[str], victim: int, step: int, steps: int, every: int, tmp: str) -> dict | None:
    ckpt = os.path.join(tmp, "ckpt")
    cmd = [*mpirun_cmd(), PY, str(EXAMPLES / f"{script}_mpi4py.py"), "--steps", str(steps), *args, "--progress",
           "--checkpoint-dir", ckpt, "--checkpoint-every", str(every)]
    first = run_job([*cmd, "--kill-rank", str(victim), "--kill-step", str(step)], dict(os.environ), tmp, 600)
    if first is None:
        return {"error": "hang"}
    kill = [e for e in events_of(first[1]) if e["event"] == "kill"]
    if not kill:
        return {"error": "no kill: " + first[2][-800:]}
    t = kill[0]["time"]
    relaunch_at = time.time()  # mpirun has torn the job down: the driver relaunches at once
    second = run_job(cmd, dict(os.environ), tmp, 600)
    if second is None or second[0] != 0:
        return {"error": "relaunch failed"}
    ev = events_of(second[1])
    resumed = [e for e in ev if e["event"] == "resumed"]
    start = resumed[0]["step"]
    reloaded = max(e["time"] for e in resumed)
    back = [e["time"] for e in ev if e["event"] == "step" and e["step"] == step - 1]
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


def step_ms(script: str, args: list[str], tmp: str) -> float | None:
    """Step time of the plain mpi4py twin (4 ranks, no snapshots)."""
    cmd = [*mpirun_cmd(), PY, str(EXAMPLES / f"{script}_mpi4py.py"), "--steps", "10", *args, "--progress"]
    ran = run_job(cmd, dict(os.environ), tmp, 600)
    if ran is None or ran[0] != 0:
        return None
    st = sorted(e["time"] for e in events_of(ran[1]) if e["event"] == "step" and e["rank"] == 0)
    return round(1e3 * (st[-1] - st[2]) / (len(st) - 3), 1) if len(st) > 4 else None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--state-mib", type=float, default=64)
    p.add_argument("--kills", type=int, default=10)
    p.add_argument("--baseline-kills", type=int, default=5)
    p.add_argument("--mlp-batches", default="16,256", help="MLP batch sizes: a short and a long step")
    p.add_argument("--short-state-mib", type=float, default=8,
                   help="also the stencil with this state per rank, for short steps (0: skip)")
    p.add_argument("--skip-overhead", action="store_true")
    p.add_argument("--only-overhead", action="store_true",
                   help="measure only the overhead, and update it in an existing --out file")
    p.add_argument("--rounds", type=int, default=8, help="overhead: rounds of blocks (after a warm-up round)")
    p.add_argument("--block", type=int, default=5, help="overhead: steps per block")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "e2e.json"))
    a = p.parse_args()
    mib = str(a.state_mib)
    configs = [(f"mlp-batch{b}", "train_mlp", ["--state-mib", mib, "--batch", b]) for b in a.mlp_batches.split(",")]
    configs.append(("jacobi", "jacobi", ["--state-mib", mib]))
    if a.short_state_mib:
        configs.append((f"jacobi-{a.short_state_mib:g}MiB", "jacobi", ["--state-mib", str(a.short_state_mib)]))
    result = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform()}, "time": time.time(),
              "state_mib": a.state_mib, "workloads": {}}
    if a.only_overhead:
        if os.path.exists(a.out):
            result = json.load(open(a.out))
        configs = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, script, args in configs:
            ms = step_ms(script, args, tmp)
            print(f"== {name}: {ms} ms per step (plain mpi4py twin, 4 ranks)", flush=True)
            steps_total = 30
            rows = []
            for i in range(a.kills):
                step = 12 + (i % 5)
                row = dpmpi_kill(script, args, i % 4, step, steps_total, tmp)
                rows.append(row)
                print("  dpmpi kill", i, {k: round(v, 1) if isinstance(v, float) else v for k, v in row.items()},
                      flush=True)
            res = {"step_ms": ms, "dpmpi": summarize(rows, ["resume_ms", "detect_ms", "repair_ms", "restore_ms",
                                                             "recompute_ms", "caught_up_ms", "steps_recomputed"]),
                   "dpmpi_runs": rows, "baseline": {}}
            for every in (10, 1):
                brows = []
                for i in range(a.baseline_kills):
                    step = 20 + (i * 7) % 10 if every == 10 else 12 + (i % 5)
                    with tempfile.TemporaryDirectory(dir=tmp) as sub:
                        brow = baseline_kill(script, args, i % 4, step, step + 2, every, sub)
                    brows.append(brow)
                    print(f"  baseline every {every} kill", i,
                          {k: round(v, 1) if isinstance(v, float) else v for k, v in brow.items()}, flush=True)
                res["baseline"][f"every{every}"] = summarize(brows, ["teardown_ms", "reloaded_ms", "recompute_ms",
                                                                     "caught_up_ms", "steps_recomputed"])
                res["baseline"][f"every{every}_runs"] = brows
            d, b10 = res["dpmpi"], res["baseline"]["every10"]
            if d["resume_ms"] and b10["reloaded_ms"]:
                res["resume_speedup_vs_relaunch"] = round(b10["reloaded_ms"] / d["resume_ms"], 1)
                res["caught_up_speedup_vs_every10"] = round(b10["caught_up_ms"] / d["caught_up_ms"], 1)
                b1 = res["baseline"]["every1"]
                if b1["caught_up_ms"]:
                    res["caught_up_speedup_vs_every1"] = round(b1["caught_up_ms"] / d["caught_up_ms"], 1)
            print(f"  dpmpi: time to resume {d['resume_ms']} ms (detect {d['detect_ms']}, repair {d['repair_ms']}, "
                  f"restore {d['restore_ms']}), steps recomputed {d['mean_steps_recomputed']} on average, "
                  f"kill -> caught up {d['caught_up_ms']} ms")
            for k in ("every10", "every1"):
                b = res["baseline"][k]
                print(f"  baseline ({k}): kill -> relaunched and reloaded {b['reloaded_ms']} ms, steps recomputed "
                      f"{b['mean_steps_recomputed']} on average, kill -> caught up {b['caught_up_ms']} ms")
            result["workloads"][name] = res
        if not a.skip_overhead:
            result["overhead"] = {}
            for w in ("mlp", "jacobi", "accel"):
                part = os.path.join(tmp, f"ov_{w}.json")
                cmd = [PY, "-m", "dpmpi.run", "-n", "4", "--", PY, str(ROOT / "bench" / "_e2e_overhead.py"),
                       "--workload", w, "--state-mib", mib, "--out", part, "--rounds", str(a.rounds),
                       "--block", str(a.block)]
                ran = run_job(cmd, dict(os.environ), tmp, 1200)
                if ran is None or ran[0] != 0 or not os.path.exists(part):
                    print(f"overhead {w}: failed", ran and ran[2][-1500:])
                    continue
                ov = json.load(open(part))
                result["overhead"][w] = ov
                print(f"== overhead, {w} ({ov['state_mib']} MiB/rank; plain copy {ov['copy_ms']} ms, synchronous "
                      f"snapshot {ov['sync_snapshot_ms']} ms):")
                for k, r in ov["by_snapshot_every"].items():
                    print(f"  every {k:>2}: {r['step_ms']} ms/step, overhead {r['overhead_pct']}%, per snapshot "
                          f"{r['extra_ms_per_snapshot']} ms = {r['extra_per_snapshot_vs_copy']}x the plain copy, "
                          f"hidden {r['hidden_fraction']}")
    pathlib.Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
    print("saved", a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
