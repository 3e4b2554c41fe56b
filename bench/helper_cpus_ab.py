"""A/B of DPMPI_HELPER_CPUS on a 2-core machine: examples/jacobi.py at 64 MiB, 2 active + 1 spare,
all pinned to core 0 (taskset; dpmpi-run --bind-to none --oversubscribe) so that core 1 is free
for the snapshot threads (auto) or not used (none); rank 0/1 SIGKILLed at the start of step 5,
jobs alternated. Prints medians of the restore phase, kill -> every rank restored, kill -> caught
up, and the final digests (the same in every job).

    cd /tmp && REPO/.venv/bin/python REPO/bench/helper_cpus_ab.py JOBS_PER_SETTING
"""
import json, os, subprocess, sys, statistics
from dpmpi.bench.common import fault_records, json_lines
B = os.path.dirname(sys.executable)
def job(victim, helpers, delay=""):
    env = dict(os.environ, DPMPI_FAULTS=f"{victim}:step@5{delay}:KILL", DPMPI_HELPER_CPUS=helpers)
    r = subprocess.run([f"{B}/dpmpi-run", "-n", "3", "--spares", "1", "--bind-to", "none", "--oversubscribe", "--",
                        "taskset", "-c", "0", f"{B}/python", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "jacobi.py"), "--steps", "8", "--state-mib", "64"],
                       env=env, capture_output=True, text=True, timeout=120)
    k = fault_records(r.stderr)[0]["time"]
    recs = [x for f in json_lines(r.stdout) if f.get("event") == "final" for x in f["recoveries"]]
    digests = sorted(f["digest"] for f in json_lines(r.stdout) if f.get("event") == "final")
    rep = max(x["repaired_at"] for x in recs); rest = max(x["restored_at"] for x in recs)
    caught = max(x["caught_up_at"] or x["resumed_at"] for x in recs)
    return 1e3 * (rest - rep), 1e3 * (rest - k), 1e3 * (caught - k), digests
res = {"auto": [], "none": []}
for i in range(int(sys.argv[1])):
    for h in ("auto", "none"):
        res[h].append(job(i % 2, h))
for h, rows in res.items():
    print(h, "restore phase med %.1f, kill->restored med %.1f, kill->caught up med %.1f" % tuple(statistics.median(r[j] for r in rows) for j in range(3)),
          "digests", set(tuple(r[3]) for r in rows))
