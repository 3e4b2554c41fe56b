"""Node failures on the simulated cluster (dpmpi.cluster_sim; needs root): detection, repair and
restore times when every rank of one node is killed, and what a whole-node kill and a silent
node do to the job.

    python bench/cluster_sim.py [--nodes 2,3,4] [--slots 4] [--repeats 20] [--mib 1]
                                [--scenarios ranks,node,cut] [--out bench/results/cluster_sim.json]

Each run is one dpmpi-run job of tests/programs/cluster_snap.py over N namespaces ("nodes") of
``--slots`` slots each, with as many spares as slots (dpmpi spreads them over the nodes, so the
spares left after losing one node can replace its active ranks). Logical rank 0 pauses on a FIFO
after committing epoch 3; the harness kills, then releases it:

* ``ranks``: every MPI process of node 1 SIGKILLed, its prted alive. Times are from the
  harness's clock just before the kill to each survivor's events (same machine clock):
  ``detect``: to its ProcFailedError/RevokedError (first and last survivor; rank 0 is
  released right after the kill, so its own detection is not a pure measure);
  ``repaired``: to the last survivor holding the repaired communicator; ``restored``: to the
  last rank (replacements included) done restoring. ``ok``: exit code 0, every rank restored
  bit for bit and finished with the state of a failure-free run.
* ``node``: every process of node 1, prted included: the job's end (seconds), exit code, and
  whether dpmpi-run named the lost node.
* ``cut``: node 1's link cut: the same, with dpmpi-run's default daemon keepalives.

The machine has 2 cores: every node's processes share them (oversubscribed), and traffic between
"nodes" goes over TCP on veth pairs, not a real network.
"""
import argparse
import json
import os
import pathlib
import platform
import statistics
import sys
import time

from dpmpi import cluster_sim

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "tests" / "programs" / "cluster_snap.py"
PAUSE_AT, EPOCHS = 3, 5


def one_run(nodes: int, slots: int, mib: float, scenario: str, timeout: float) -> dict:
    with cluster_sim.Cluster(nodes=nodes, slots=slots) as cluster:
        fifo = cluster.gate()
        n = nodes * slots
        cmd = [sys.executable, "-m", "dpmpi.run", "-n", str(n), "--spares", str(slots), *cluster.mpirun_args(), "--",
               sys.executable, str(PROGRAM), "--fifo", str(fifo), "--pause-at", str(PAUSE_AT),
               "--epochs", str(EPOCHS), "--mib", str(mib)]
        started = time.time()
        job = cluster.start(cmd, env=dict(os.environ))
        try:
            job.wait_event("paused", timeout)
        except TimeoutError as exc:
            rc, _out, err = job.finish(5)
            return {"ok": False, "error": f"{exc}; exit {rc}", "stderr": err[-1500:]}
        t_kill = time.time()
        if scenario == "ranks":
            killed = cluster.kill_ranks(1)
        elif scenario == "node":
            killed = cluster.kill_node(1)
        else:
            cluster.cut(1)
            killed = []
        cluster.release(fifo)
        rc, out, err = job.finish(timeout)
        ended = time.time()
    row = {"exit": rc, "hang": rc is None, "killed": len(killed), "startup_s": round(t_kill - started, 2),
           "end_s": round(ended - t_kill, 3)}
    if scenario != "ranks":
        row["lost_node_named"] = any("dpmpi-run: " in line and " was lost " in line for line in err.splitlines())
        row["ok"] = rc not in (None, 0) and row["lost_node_named"]  # the documented behaviour
        return row
    caught = [e["time"] for e in job.events if e["event"] == "caught"]
    repaired = [e["repaired_at"] for e in job.events if e["event"] == "repaired"]
    restored = [e for e in job.events if e["event"] == "restored"]
    done = job.by_rank("done")
    n_active = n - slots
    row.update({
        "detect_first_ms": round(1e3 * (min(caught) - t_kill), 2) if caught else None,
        "detect_last_ms": round(1e3 * (max(caught) - t_kill), 2) if caught else None,
        "repaired_ms": round(1e3 * (max(repaired) - t_kill), 2) if repaired else None,
        "repair_total_ms": max((e["total_ms"] for e in job.events if e["event"] == "repaired"), default=None),
        "restored_ms": round(1e3 * (max(e["time"] for e in restored) - t_kill), 2) if restored else None,
        "restore_ms": max((e["detail"]["total_ms"] for e in restored), default=None),
        "ok": rc == 0 and sorted(done) == list(range(n_active)) and len(restored) == n_active
        and all(e["ok"] and e["epoch"] == PAUSE_AT for e in restored)
        and all(d["digest"] == d["want"] for d in done.values()),
    })
    other = [line for line in err.splitlines() if line.strip() and not line.startswith("dpmpi-run: ")]
    row["stderr_other_lines"] = len(other)  # lines that are not dpmpi-run's account (a clean run has none)
    if not row["ok"] or other:
        row["stderr"] = err[-1500:]
    return row


def summary(rows: list[dict], key: str) -> dict:
    values = [r[key] for r in rows if r.get(key) is not None]
    if not values:
        return {}
    values.sort()
    return {"median": round(statistics.median(values), 2), "p90": round(values[int(0.9 * (len(values) - 1))], 2),
            "min": round(values[0], 2), "max": round(values[-1], 2), "n": len(values)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="2", help="comma-separated node counts, e.g. 2,3,4")
    parser.add_argument("--slots", type=int, default=0, help="slots per node (default: 4 at 2 nodes, else 2)")
    parser.add_argument("--repeats", type=int, default=20, help="runs per node count for 'ranks'")
    parser.add_argument("--node-repeats", type=int, default=3, help="runs per node count for 'node' and 'cut'")
    parser.add_argument("--mib", type=float, default=1.0, help="snapshot state per rank, MiB")
    parser.add_argument("--scenarios", default="ranks,node,cut")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "cluster_sim.json"))
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench/cluster_sim.py: the simulated cluster needs root", file=sys.stderr)
        return 2
    scenarios = args.scenarios.split(",")
    unknown = set(scenarios) - {"ranks", "node", "cut"}
    if unknown:
        parser.error(f"unknown scenarios {sorted(unknown)}: use ranks, node, cut")
    results = []
    for nodes in [int(x) for x in args.nodes.split(",")]:
        slots = args.slots or (4 if nodes == 2 else 2)
        for scenario in scenarios:
            repeats = args.repeats if scenario == "ranks" else args.node_repeats
            rows = []
            for i in range(repeats):
                row = one_run(nodes, slots, args.mib, scenario, args.timeout)
                rows.append(row)
                print(f"{scenario} nodes={nodes} slots={slots} run {i + 1}/{repeats}: "
                      + json.dumps({k: v for k, v in row.items() if k != "stderr"}), flush=True)
            keys = (["detect_first_ms", "detect_last_ms", "repaired_ms", "repair_total_ms", "restored_ms",
                     "restore_ms"] if scenario == "ranks" else ["end_s"])
            results.append({"scenario": scenario, "nodes": nodes, "slots": slots, "processes": nodes * slots,
                            "spares": slots, "ok": sum(bool(r["ok"]) for r in rows), "runs": len(rows),
                            "summary": {k: summary(rows, k) for k in keys}, "rows": rows})
    report = {"bench": "cluster_sim", "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
              "mib": args.mib, "pause_at": PAUSE_AT, "epochs": EPOCHS, "results": results}
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    for r in results:
        print(f"{r['scenario']:5s} nodes={r['nodes']} ok {r['ok']}/{r['runs']} "
              + " ".join(f"{k}={v.get('median')}" for k, v in r["summary"].items()))
    print(f"wrote {out}")
    return 0 if all(r["ok"] == r["runs"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
