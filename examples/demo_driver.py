"""``make demo``: run examples/allreduce_repair.py on 4 ranks with dpmpi-run, SIGKILL rank 2 in
the middle, and tell what happened, with the timings measured from the kill."""
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
N, VICTIM, ITERS, KILL_AT = 4, 2, 2000, 1000


def main() -> int:
    print(f"dpmpi demo: {N} ranks loop an Allreduce ({ITERS} iterations); rank {VICTIM} is killed with SIGKILL "
          f"at its Allreduce #{KILL_AT}.\n")
    env = dict(os.environ, DPMPI_FAULTS=f"{VICTIM}:Allreduce@{KILL_AT}:KILL")
    cmd = [sys.executable, "-m", "dpmpi.run", "-n", str(N), "--", sys.executable, str(HERE / "allreduce_repair.py"),
           "--iters", str(ITERS), "--events"]
    print("$ DPMPI_FAULTS=" + env["DPMPI_FAULTS"], " ".join(["dpmpi-run", "-n", str(N), "--", "python",
          "examples/allreduce_repair.py", "--iters", str(ITERS)]))
    t_launch = time.time()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, cwd=HERE)
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    kills = [json.loads(line.split(" ", 1)[1]) for line in proc.stderr.splitlines() if line.startswith("[dpmpi-fault]")]
    others = [line for line in proc.stderr.splitlines() if not line.startswith("[dpmpi-fault]")]

    def at(name):
        return {e["rank"]: e for e in events if e["event"] == name}

    start, detected, shrunk, agreed, resumed, done = (at(k) for k in ("start", "detected", "shrunk", "agreed", "resumed", "done"))
    if not kills or len(done) != N - 1:
        print("\nthe demo did not go as planned:\n" + proc.stdout + proc.stderr)
        return 1
    t_kill = kills[0]["time"]

    def line(label: str, t: float) -> None:
        print(f"  {label:<50s} at {1e3 * (t - t_kill):7.2f} ms")

    print(f"\n  {len(start)} ranks started ({1e3 * (max(e['time'] for e in start.values()) - t_launch):.0f} ms after launch)")
    line(f"rank {VICTIM} SIGKILLed (t = 0)", t_kill)
    for r in sorted(detected, key=lambda r: detected[r]["time"]):
        e = detected[r]
        line(f"rank {r} notices in iteration {e['iteration']} ({e['error']})", e["time"])
    line(f"all survivors revoked and shrunk to {shrunk[min(shrunk)]['size']} ranks", max(e["time"] for e in shrunk.values()))
    line("all survivors agreed on the new communicator", max(e["time"] for e in agreed.values()))
    r0 = resumed[min(resumed)]
    print(f"  resumed at iteration {r0['iteration']} on ranks {r0['alive']}")
    d = done[min(done)]
    ok = all(e["wrong_sums"] == 0 for e in done.values()) and d["iterations"] == ITERS
    print(f"  finished {d['iterations']} iterations on {d['size']} ranks; wrong sums: {d['wrong_sums']}; "
          f"last sum {d['last_sum']:.0f} (= 1+2+4 for ranks 0, 1, 3)")
    account = [line for line in others if line.startswith("dpmpi-run:")]
    if account:
        print("  " + account[-1])
    print(f"  job exit code: {proc.returncode}")
    detect = [e["time"] - t_kill for e in detected.values()]
    summary = {
        "recovered": ok and proc.returncode == 0,
        "kill_to_first_detect_ms": round(1e3 * min(detect), 2),
        "kill_to_all_detect_ms": round(1e3 * max(detect), 2),
        "kill_to_all_shrunk_ms": round(1e3 * (max(e["time"] for e in shrunk.values()) - t_kill), 2),
        "kill_to_all_agreed_ms": round(1e3 * (max(e["time"] for e in agreed.values()) - t_kill), 2),
        "median_detect_ms": round(1e3 * statistics.median(detect), 2),
    }
    print("\n" + json.dumps(summary))
    return 0 if summary["recovered"] else 1


if __name__ == "__main__":
    sys.exit(main())
