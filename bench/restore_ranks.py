"""Each rank's view of one recovery, for finding where a time to resume goes: jobs of an example
(jacobi, mlp: train_mlp --batch 16, accel: the same after a 250 ms GIL-released wait) at 64 MiB
per rank, one rank SIGKILLed at the start of step 5 (or DELAY s into it), and for every rank the
times from the kill to: the watcher's notice, the failure caught, repaired, restored, with the
restore's own phases (Snapshot.last_restore). One JSON line per job.

    cd /tmp && REPO/.venv/bin/python REPO/bench/restore_ranks.py WORKLOAD JOBS [ACTIVE] [DELAY]
"""
import json
import os
import subprocess
import sys

from dpmpi.bench.common import fault_records, json_lines

here = os.path.dirname(os.path.abspath(__file__))
examples = os.path.join(os.path.dirname(here), "examples")
binary = os.path.dirname(sys.executable)
workload, jobs = sys.argv[1], int(sys.argv[2])
active = int(sys.argv[3]) if len(sys.argv) > 3 else 4
delay = f"+{float(sys.argv[4]):.4f}" if len(sys.argv) > 4 and float(sys.argv[4]) > 0 else ""
script, *args = {"jacobi": ["jacobi", "--state-mib", "64"],
                 "mlp": ["train_mlp", "--state-mib", "64", "--batch", "16"],
                 "accel": ["train_mlp", "--state-mib", "64", "--batch", "16", "--wait-ms", "250"]}[workload]


def ms(t: float, kill: float) -> float | None:
    return round(1e3 * (t - kill), 2) if t else None


for job in range(jobs):
    victim = job % active
    env = dict(os.environ, DPMPI_FAULTS=f"{victim}:step@5{delay}:KILL")
    ran = subprocess.run([os.path.join(binary, "dpmpi-run"), "-n", str(active + 1), "--spares", "1", "--",
                          sys.executable, os.path.join(examples, f"{script}.py"), "--steps", "8", *args],
                         env=env, capture_output=True, text=True, timeout=120)
    kills = fault_records(ran.stderr)
    if ran.returncode != 0 or not kills:
        print(json.dumps({"job": job, "error": ran.stderr[-600:]}), flush=True)
        continue
    kill = kills[0]["time"]
    ranks = []
    for final in json_lines(ran.stdout):
        for r in final.get("recoveries", []) if final.get("event") == "final" else []:
            ranks.append({"rank": final.get("rank"), "by": r["detected_by"] or "new",
                          "noticed": ms(r["noticed_at"], kill), "caught": ms(r["caught_at"], kill) if r["error"] else None,
                          "repaired": ms(r["repaired_at"], kill), "restored": ms(r["restored_at"], kill),
                          "restore_ms": r["restore"].get("ms"), "received": r["restore"].get("received"),
                          "read": r["restore"].get("read"), "kept": r["restore"].get("kept"), "epoch": r["restored_epoch"], "failed": r["failed_step"]})
    print(json.dumps({"job": job, "workload": workload, "victim": victim, "ranks": ranks}), flush=True)
