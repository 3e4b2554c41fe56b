"""Kill a rank in the middle of a training step, many jobs in a row, with and without dpmpi's
filter of a dead peer's late messages (DPMPI_LATE_FILTER), alternating, so both counts come from
the same run on the same machine.

    python bench/kill_mid_step.py [--jobs 100] [--filter both|1|0] [--seed S] [--out bench/results/kill_mid_step.json]

Each job is `examples/train_mlp.py --steps 20 --state-mib 64 --batch 16` under `dpmpi-run -n 5
--spares 1` (4 active + 1 spare), one active rank (jobs take the victims 0..3 in turn)
SIGKILLed D seconds into step S (S 13..17 in turn, D uniform in 0..0.15 s, from the seed).
Verdicts: "ok" (exit 0, four "final" lines, nothing alarming on stderr), "hang" (not done after
--timeout s; the job is killed), "crash" (a survivor crashed: fewer than four "final" lines, or
a segfault or OPAL ERROR on stderr), "failed" (any other non-zero exit). Before 2026-12-01's
filter about 1 job in 30 of this loop hung or crashed (Open MPI 5.0.11's late-FIN defect,
docs/mpi-facts.md).
"""
import argparse
import json
import os
import pathlib
import platform
import random
import sys
import time

from dpmpi.bench.common import error_tail, run_job

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "examples" / "train_mlp.py"
ALARMS = ("Segmentation", "OPAL ERROR", "Traceback", "did not return in time")


def verdict(ran: tuple[int, str, str] | None) -> str:
    if ran is None:
        return "hang"
    rc, out, err = ran
    finals = sum(1 for line in out.splitlines() if '"final"' in line)
    if finals != 4 or "Segmentation" in err or "OPAL ERROR" in err:
        return "crash"
    if rc != 0 or any(a in err for a in ALARMS):
        return "failed"
    return "ok"


def one_job(i: int, late_filter: str, rng: random.Random, timeout: float) -> dict:
    victim, step, delay = i % 4, 13 + i % 5, round(rng.uniform(0.0, 0.15), 4)
    env = dict(os.environ, DPMPI_FAULTS=f"{victim}:step@{step + 1}+{delay}:KILL", DPMPI_LATE_FILTER=late_filter)
    cmd = [sys.executable, "-m", "dpmpi.run", "-n", "5", "--spares", "1", "--", sys.executable, str(PROGRAM),
           "--steps", "20", "--state-mib", "64", "--batch", "16"]
    started = time.monotonic()
    ran = run_job(cmd, env, "/", timeout)
    v = verdict(ran)
    rec = {"job": i, "filter": late_filter, "victim": victim, "step": step, "delay_s": delay, "verdict": v,
           "seconds": round(time.monotonic() - started, 2)}
    if v != "ok" and ran is not None:
        rec["stderr"] = error_tail(ran[2])
    return rec


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=100, help="jobs in all (with --filter both, half each)")
    p.add_argument("--filter", choices=("both", "1", "0"), default="both")
    p.add_argument("--seed", type=int, default=20261201)
    p.add_argument("--timeout", type=float, default=40.0, help="a job not done after this long is a hang")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "kill_mid_step.json"))
    a = p.parse_args()
    rng = random.Random(a.seed)
    modes = ["1", "0"] if a.filter == "both" else [a.filter]
    jobs = []
    for i in range(a.jobs):
        rec = one_job(i, modes[i % len(modes)], rng, a.timeout)
        jobs.append(rec)
        print(json.dumps({k: rec[k] for k in ("job", "filter", "verdict", "seconds")}), flush=True)
    summary = {}
    for m in modes:
        mine = [j for j in jobs if j["filter"] == m]
        counts = {v: sum(1 for j in mine if j["verdict"] == v) for v in ("ok", "hang", "crash", "failed")}
        summary[f"filter={m}"] = {**counts, "jobs": len(mine)}
    result = {"bench": "kill_mid_step", "cores": os.cpu_count(), "machine": platform.node(),
              "oversubscribed": (os.cpu_count() or 1) < 5, "seed": a.seed, "timeout_s": a.timeout,
              "summary": summary, "jobs": jobs}
    out = pathlib.Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
