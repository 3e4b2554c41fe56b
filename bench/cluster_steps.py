"""Failure-free step times across simulated nodes against one node, same job, same run (needs
root for the namespaces): do steps stall while the snapshots replicate over TCP?

    python bench/cluster_steps.py [--runs 3] [--steps 60] [--mib 16] [--replicas 2]
                                  [--snapshot-every 1] [--nodes 2] [--slots 4]
                                  [--out bench/results/cluster_steps.json]

Each run is ``examples/train_mlp.py --progress`` under dpmpi-run, ``nodes * slots`` processes of
which ``slots`` are spares: once on ``nodes`` simulated nodes (dpmpi.cluster_sim; TCP between
them), once on this machine without namespaces (shared memory). From rank 0's step lines: the
median time between two steps, the longest, and how many took over 0.5 s; and how late a
thread of this process that sleeps 50 ms at a time woke at worst meanwhile (the machine's own
stalls: this process is idle while the job runs). docs/benchmarks.md has the figures of the
thirty-fourth session. On a 2-core machine the default (4 active ranks + 4 spares) is
oversubscribed.
"""
import argparse
import json
import os
import pathlib
import platform
import statistics
import sys
import tempfile
import threading
import time

from dpmpi import cluster_sim
from dpmpi.bench.common import error_tail, json_lines, run_job, write_json

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "examples" / "train_mlp.py"
SLOW = 0.5  # seconds: a step this long is a stall here (steps take 0.1-0.2 s)


def gaps(stdout: str) -> list[float]:
    steps = sorted(e["time"] for e in json_lines(stdout) if e.get("event") == "step" and e.get("rank") == 0)
    return [b - a for a, b in zip(steps, steps[1:])]


def summary(where: str, rc, seconds: float, stdout: str, stderr: str) -> dict:
    g = gaps(stdout)
    row = {"where": where, "exit": rc, "seconds": round(seconds, 2), "steps": len(g) + 1 if g else 0,
           "median_step_s": round(statistics.median(g), 3) if g else None,
           "longest_step_s": round(max(g), 3) if g else None, "over_0.5s": sum(x > SLOW for x in g),
           "replication_reports": stderr.count("snapshot replication job on")}
    if rc != 0:
        row["stderr"] = error_tail(stderr)
    return row


class Bystander:
    """A thread of this process that sleeps 50 ms at a time while a job runs and keeps how late it
    woke at worst: a measure of the machine's own stalls (this VM stalls under heavy traffic
    between namespaces; docs/limitations.md). Owned by ``one_run``; lives for one job."""

    def __init__(self) -> None:
        self.worst = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.perf_counter()
            time.sleep(0.05)
            self.worst = max(self.worst, time.perf_counter() - t - 0.05)

    def __enter__(self) -> "Bystander":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def one_run(args: argparse.Namespace, across: bool) -> dict:
    with Bystander() as bystander:
        row = job(args, across)
    return dict(row, bystander_late_s=round(bystander.worst, 3))


def job(args: argparse.Namespace, across: bool) -> dict:
    n = args.nodes * args.slots
    program = [sys.executable, str(PROGRAM), "--steps", str(args.steps), "--state-mib", str(args.mib),
               "--replicas", str(args.replicas), "--snapshot-every", str(args.snapshot_every), "--progress"]
    env = dict(os.environ, DPMPI_REPL_REPORT="3")
    started = time.time()
    if not across:
        ran = run_job([sys.executable, "-m", "dpmpi.run", "-n", str(n), "--spares", str(args.slots), "--", *program],
                      env, tempfile.gettempdir(), args.timeout)  # (cwd: not the checkout, so the installed dpmpi)
        rc, out, err = ran if ran is not None else (None, "", "")  # (None: it hung, its session killed)
        return summary("one node", rc, time.time() - started, out, err)
    with cluster_sim.Cluster(nodes=args.nodes, slots=args.slots) as cluster:
        cmd = [sys.executable, "-m", "dpmpi.run", "-n", str(n), "--spares", str(args.slots),
               *cluster.mpirun_args(), "--", *program]
        rc, out, err = cluster.start(cmd, env=env).finish(args.timeout)
        return summary(f"{args.nodes} simulated nodes", rc, time.time() - started, out, err)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--mib", type=float, default=16)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--snapshot-every", type=int, default=1)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "cluster_steps.json"))
    args = ap.parse_args()
    rows = []
    for i in range(args.runs):
        for across in (False, True):
            rows.append(dict(one_run(args, across), run=i))
            print(json.dumps(rows[-1]), flush=True)
    result = {"config": vars(args), "machine": {"cpus": os.cpu_count(), "host": platform.node()}, "runs": rows}
    out = pathlib.Path(args.out)
    print(f"saved {write_json(out.parent, out.stem, result)}")


if __name__ == "__main__":
    main()
