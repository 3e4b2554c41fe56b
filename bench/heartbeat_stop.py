"""A rank stops (SIGSTOP), many times in a row: 4 ranks loop an Allreduce (tests/programs/survive.py),
the victim stops itself, the hung-rank detector (DPMPI_HEARTBEAT_TIMEOUT=T) kills it, the
survivors revoke, shrink, agree and finish.

    python bench/heartbeat_stop.py [--runs 20] [--timeout 2] [--out bench/results/heartbeat_stop.json]

Each run is a dpmpi-run job with a hard timeout; the victim rotates over ranks 0..3. A run
recovered when the job's exit code is 0, the 3 survivors finished with the right sum and the
detector's line is on stderr. Reports stop -> killed (the silence the detector saw, from its
line) and stop -> resumed (the last survivor's `repaired` event), median and max, in seconds.
The stop time is the victim's own timestamp just before SIGSTOP, on the same clock.
"""
import argparse
import json
import os
import pathlib
import re
import statistics
import sys

from dpmpi.bench.common import run_job

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "tests" / "programs" / "survive.py"
LINE = re.compile(r"\[dpmpi\] rank (\d+) \(pid \d+\) sent no heartbeat for ([0-9.]+) s")


def one_run(victim: int, timeout: float, n: int = 4) -> dict:
    env = dict(os.environ, DPMPI_FAULTS=f"{victim}:Allreduce@200:STOP", DPMPI_HEARTBEAT_TIMEOUT=str(timeout))
    cmd = [sys.executable, "-m", "dpmpi.run", "-n", str(n), "--", sys.executable, str(PROGRAM)]
    ran = run_job(cmd, env, "/", 10 * timeout + 60)
    if ran is None:
        return {"victim": victim, "ok": False, "why": "hang"}
    rc, out, err = ran
    events = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    stops = [json.loads(x.split(" ", 1)[1]) for x in err.splitlines() if x.startswith("[dpmpi-fault]")]
    lines = LINE.findall(err)
    repaired = [e for e in events if e["event"] == "repaired"]
    finished = [e for e in events if e["event"] == "finished"]
    want = float(sum(r + 1 for r in range(n) if r != victim))
    ok = (rc == 0 and len(stops) == 1 and len(lines) == 1 and int(lines[0][0]) == victim
          and len(finished) == n - 1 and all(e["sum"] == want for e in repaired) and len(repaired) == n - 1)
    # survivors whose MPI_Finalize hung and were ended by dpmpi's Finalize watchdog (not a failure)
    rec = {"victim": victim, "ok": ok, "rc": rc, "finalize_watchdog": err.count("MPI_Finalize did not return in time")}
    if stops and repaired:
        rec["stop_to_resumed_s"] = max(e["time"] for e in repaired) - stops[0]["time"]
    if lines:
        rec["silence_seen_s"] = float(lines[0][1])
    if not ok:
        rec["stderr"] = err[-2000:]
    return rec


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=2.0)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "heartbeat_stop.json"))
    args = ap.parse_args()
    runs = []
    for i in range(args.runs):
        rec = one_run(i % 4, args.timeout)
        runs.append(rec)
        print(json.dumps({k: v for k, v in rec.items() if k != "stderr"}), flush=True)
    resumed = [r["stop_to_resumed_s"] for r in runs if "stop_to_resumed_s" in r]
    seen = [r["silence_seen_s"] for r in runs if "silence_seen_s" in r]
    summary = {"T_s": args.timeout, "runs": len(runs), "recovered": sum(r["ok"] for r in runs),
               "runs_with_finalize_watchdog": sum(1 for r in runs if r.get("finalize_watchdog")),
               "stop_to_resumed_s": {"median": statistics.median(resumed), "min": min(resumed), "max": max(resumed)} if resumed else None,
               "silence_seen_s": {"median": statistics.median(seen), "min": min(seen), "max": max(seen)} if seen else None}
    print(json.dumps(summary))
    pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.out).write_text(json.dumps({"summary": summary, "runs": runs}, indent=1))
    return 0 if summary["recovered"] == len(runs) else 1


if __name__ == "__main__":
    sys.exit(main())
