"""Kill-and-recover, many times in a row: 4 ranks loop an Allreduce
(examples/allreduce_repair.py), rank 2 dies, the survivors revoke, shrink, agree and finish.

    python bench/stress_kill.py [--cycles 50] [--kinds KILL,TERM,...] [--out bench/results/stress_kill.json]

Each cycle is a dpmpi-run job with a hard timeout. A cycle fails if it hangs, if any sum is
wrong, if a survivor does not finish, or if the job's exit code is not 0. Reports, per kind of
death and over all cycles, kill->detected (first and last survivor to notice) and kill->shrunk
(the last survivor to hold the shrunk communicator), median and max, in ms. The kill time is
the victim's own timestamp just before it dies (dpmpi.faults), on the same clock.
"""
import argparse
import json
import os
import pathlib
import platform
import statistics
import sys
import time

from dpmpi.bench.common import run_job

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "examples" / "allreduce_repair.py"
ALL_KINDS = ["KILL", "TERM", "SEGV", "ABORT", "EXIT", "SYSEXIT", "EXCEPTION"]


def one_cycle(kind: str, n: int, victim: int, at: int, timeout: float) -> dict:
    env = dict(os.environ, DPMPI_FAULTS=f"{victim}:Allreduce@{at}:{kind}")
    cmd = [sys.executable, "-m", "dpmpi.run", "-n", str(n), "--", sys.executable, str(PROGRAM),
           "--iters", str(2 * at), "--events"]
    ran = run_job(cmd, env, "/", timeout)
    if ran is None:
        return {"kind": kind, "ok": False, "why": "hang"}
    returncode, out, err = ran
    events = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    kills = [json.loads(x.split(" ", 1)[1]) for x in err.splitlines() if x.startswith("[dpmpi-fault]")]
    by = lambda name: [e for e in events if e["event"] == name]  # noqa: E731
    done, detected, shrunk = by("done"), by("detected"), by("shrunk")
    survivors = n - 1
    why = None
    if returncode != 0:
        why = f"exit code {returncode}"
    elif not kills:
        why = "no fault fired"
    elif len(done) != survivors or any(d["wrong_sums"] or d["iterations"] != 2 * at for d in done):
        why = "wrong result or a survivor did not finish"
    elif len(detected) != survivors or len(shrunk) != survivors:
        why = "not every survivor detected and shrank"
    if why:
        return {"kind": kind, "ok": False, "why": why, "stderr": err[-2000:]}
    t = kills[0]["time"]
    return {
        "kind": kind,
        "ok": True,
        "detect_first_ms": 1e3 * (min(e["time"] for e in detected) - t),
        "detect_last_ms": 1e3 * (max(e["time"] for e in detected) - t),
        "shrunk_ms": 1e3 * (max(e["time"] for e in shrunk) - t),
    }


def stats(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 2), "max": round(max(values), 2), "n": len(values)} if values else {}


def summarise(cycles: list[dict]) -> dict:
    ok = [c for c in cycles if c["ok"]]
    return {
        "cycles": len(cycles),
        "ok": len(ok),
        "hangs": sum(c.get("why") == "hang" for c in cycles),
        "wrong": sum(not c["ok"] and c.get("why") != "hang" for c in cycles),
        "kill_to_detected_first_ms": stats([c["detect_first_ms"] for c in ok]),
        "kill_to_detected_all_ms": stats([c["detect_last_ms"] for c in ok]),
        "kill_to_shrunk_all_ms": stats([c["shrunk_ms"] for c in ok]),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cycles", type=int, default=50)
    p.add_argument("--kinds", default=",".join(ALL_KINDS), help="kinds of death, used in turn")
    p.add_argument("-n", type=int, default=4)
    p.add_argument("--at", type=int, default=300, help="the victim dies at its Allreduce #AT")
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "stress_kill.json"))
    a = p.parse_args()
    kinds = [k.strip().upper() for k in a.kinds.split(",") if k.strip()]
    bad = [k for k in kinds if k not in ALL_KINDS]
    if bad or a.cycles < 1 or a.n < 2 or a.at < 1:
        p.error(f"--kinds from {ALL_KINDS}, --cycles >= 1, -n >= 2, --at >= 1 (unknown kinds: {bad})")
    cycles = []
    t0 = time.time()
    for i in range(a.cycles):
        c = one_cycle(kinds[i % len(kinds)], a.n, 2 % a.n if a.n > 2 else 1, a.at, a.timeout)
        cycles.append(c)
        tail = f"detect {c['detect_last_ms']:.1f} ms, shrunk {c['shrunk_ms']:.1f} ms" if c["ok"] else f"FAILED: {c['why']}"
        print(f"cycle {i + 1:3d}/{a.cycles} {c['kind']:9s} {tail}", flush=True)
    result = {
        "bench": "stress_kill",
        "ranks": a.n,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "wall_s": round(time.time() - t0, 1),
        "all": summarise(cycles),
        "by_kind": {k: summarise([c for c in cycles if c["kind"] == k]) for k in kinds},
        "cycles": cycles,
    }
    out = pathlib.Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: result["all"][k] for k in result["all"]}))
    print(f"written to {out}")
    return 0 if result["all"]["ok"] == a.cycles else 1


if __name__ == "__main__":
    sys.exit(main())
