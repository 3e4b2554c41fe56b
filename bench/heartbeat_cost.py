"""What the hung-rank detector's thread costs: CPU time and beats (memory stores) per second.

    python bench/heartbeat_cost.py [--ranks 4] [--seconds 20] [--timeout 10]

Launches a dpmpi-run job of RANKS ranks that each sleep SECONDS between two barriers and report
their heartbeat thread's CPU time (/proc/self/task/TID/schedstat: ns on a CPU; and the
utime+stime ticks of /proc/self/task/TID/stat) and the number of beats over that time.
"""
import argparse
import json
import os
import subprocess
import sys
import time


def rank_main(seconds: float) -> None:
    import dpmpi
    from dpmpi import _cext, heartbeat
    from mpi4py import MPI

    tid = heartbeat.thread_id()
    comm = dpmpi.COMM_WORLD

    def sample():
        with open(f"/proc/self/task/{tid}/schedstat") as f:
            ns = int(f.read().split()[0])
        with open(f"/proc/self/task/{tid}/stat") as f:
            stat = f.read()
        fields = stat[stat.rindex(")") + 2:].split()
        return ns, int(fields[11]) + int(fields[12]), _cext.lib.dpmpi_hb_beats(), time.monotonic()

    comm.Barrier()
    a = sample()
    time.sleep(seconds)
    b = sample()
    comm.Barrier()
    wall = b[3] - a[3]
    print(json.dumps({"rank": comm.Get_rank(), "period_s": _cext.lib.dpmpi_hb_period(), "wall_s": round(wall, 3),
                      "cpu_ns": b[0] - a[0], "cpu_ticks": b[1] - a[1], "beats": b[2] - a[2],
                      "cpu_fraction": (b[0] - a[0]) / 1e9 / wall, "beats_per_s": (b[2] - a[2]) / wall}), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--timeout", type=float, default=10)
    ap.add_argument("--rank-main", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rank_main:
        rank_main(args.seconds)
        return 0
    env = dict(os.environ, DPMPI_HEARTBEAT_TIMEOUT=str(args.timeout))
    cmd = [sys.executable, "-m", "dpmpi.run", "-n", str(args.ranks), "--", sys.executable, os.path.abspath(__file__),
           "--rank-main", "--seconds", str(args.seconds)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.seconds + 120, cwd="/")
    rows = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
    for r in sorted(rows, key=lambda r: r["rank"]):
        print(json.dumps(r))
    if rows:
        print(json.dumps({"T_s": args.timeout, "ranks": len(rows), "seconds": args.seconds,
                          "max_cpu_ms": max(r["cpu_ns"] for r in rows) / 1e6,
                          "max_cpu_fraction": max(r["cpu_fraction"] for r in rows),
                          "beats_per_s": sum(r["beats_per_s"] for r in rows) / len(rows)}))
    return p.returncode


if __name__ == "__main__":
    sys.exit(main())
