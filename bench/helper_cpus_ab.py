"""A/B of DPMPI_HELPER_CPUS on a 2-core machine: examples/jacobi.py at 64 MiB, 2 active + 1 spare,
all pinned to core 0 (taskset; dpmpi-run --bind-to none --oversubscribe) so that core 1 is free
for the snapshot threads (auto) or not used (none); rank 0/1 SIGKILLed at the start of step 5,
jobs alternated. Prints medians of the restore phase, kill -> every rank restored, kill -> caught
up, and the final digests (the same in every job).

    cd /tmp && REPO/.venv/bin/python REPO/bench/helper_cpus_ab.py JOBS_PER_SETTING
"""
import os
import statistics
import subprocess
import sys

from dpmpi.bench.common import fault_records, json_lines

BIN = os.path.dirname(sys.executable)
JACOBI = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "jacobi.py")


def job(victim: int, helpers: str) -> tuple:
    env = dict(os.environ, DPMPI_FAULTS=f"{victim}:step@5:KILL", DPMPI_HELPER_CPUS=helpers)
    ran = subprocess.run([f"{BIN}/dpmpi-run", "-n", "3", "--spares", "1", "--bind-to", "none", "--oversubscribe", "--",
                          "taskset", "-c", "0", sys.executable, JACOBI, "--steps", "8", "--state-mib", "64"],
                         env=env, capture_output=True, text=True, timeout=120)
    kill = fault_records(ran.stderr)[0]["time"]
    finals = [f for f in json_lines(ran.stdout) if f.get("event") == "final"]
    recs = [r for f in finals for r in f["recoveries"]]
    repaired, restored = max(r["repaired_at"] for r in recs), max(r["restored_at"] for r in recs)
    caught_up = max(r["caught_up_at"] or r["resumed_at"] for r in recs)
    return 1e3 * (restored - repaired), 1e3 * (restored - kill), 1e3 * (caught_up - kill), \
        tuple(sorted(f["digest"] for f in finals))


rows = {"auto": [], "none": []}
for i in range(int(sys.argv[1])):
    for setting in rows:
        rows[setting].append(job(i % 2, setting))
for setting, got in rows.items():
    med = [statistics.median(r[j] for r in got) for j in range(3)]
    print(setting, "restore phase med %.1f, kill->restored med %.1f, kill->caught up med %.1f" % tuple(med),
          "digests", {r[3] for r in got})
