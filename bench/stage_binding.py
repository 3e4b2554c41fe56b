"""How long ``Snapshot.stage()`` blocks its caller when the rank is bound to one core (dpmpi-run's
default placement) and when it has more: bound, with the snapshot's threads kept on the rank's
core (``DPMPI_HELPER_CPUS=none``) they share it with the caller; by default (``auto``) they run
on the cores no process of the job is bound to, here the other core. One rank (``dpmpi.init``),
host arrays, one stage + commit per ~20 ms "step"; the median of 30 stages, per placement,
saved as JSON.

    cd /tmp && REPO/.venv/bin/python REPO/bench/stage_binding.py [--mib 8,64] [--out FILE.json]

(from outside the repository: its dpmpi/ folder would hide the installed package)
"""
import argparse
import json
import os
import subprocess
import sys
import time

PLACEMENTS = {  # name: (dpmpi-run's arguments, DPMPI_HELPER_CPUS)
    "one core, snapshot threads on it (DPMPI_HELPER_CPUS=none)": ([], "none"),
    "one core, snapshot threads on the free core (default)": ([], "auto"),
    "unbound (--bind-to none)": (["--bind-to", "none"], "auto"),
}


def child(mib: int) -> None:
    import numpy as np

    import dpmpi

    comm = dpmpi.init()
    w = np.ones(mib << 18, np.float32)
    snap = dpmpi.Snapshot(comm, {"w": w}, replicas=0)
    stages = []
    for epoch in range(1, 34):
        w[:1] += 1
        t = time.perf_counter()
        snap.stage(epoch)
        stages.append(1e3 * (time.perf_counter() - t))
        time.sleep(0.02)  # the step
        snap.commit(epoch)
    snap.close()
    print(json.dumps({"mib": mib, "stage_ms_median": round(float(np.median(stages[3:])), 3),
                      "cpus": sorted(os.sched_getaffinity(0))}), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", default="8,64")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                                      "stage_binding.json"))
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return 0
    rows = []
    for name, (launcher, helpers) in PLACEMENTS.items():
        for mib in (int(m) for m in args.mib.split(",")):
            cmd = [sys.executable, "-m", "dpmpi.run", "-n", "1", *launcher, "--", sys.executable,
                   os.path.abspath(__file__), "--child", str(mib)]
            env = dict(os.environ, DPMPI_HELPER_CPUS=helpers)
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
            got = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
            if out.returncode or not got:
                raise SystemExit(f"{name}, {mib} MiB: exit {out.returncode}\n{out.stderr[-2000:]}")
            rows.append({"placement": name, **got[0]})
            print(json.dumps(rows[-1]), flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"bench": "stage_binding", "cores": os.cpu_count(), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
