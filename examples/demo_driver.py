"""``make demo``: train the MLP of examples/train_mlp.py on 4 ranks plus 1 spare, SIGKILL rank 2
halfway, and show what happens: progress per step, the failure, each recovery phase with its
time, the spare taking over, and the end, where the final weights are compared (by checksum)
with a failure-free run of the same program. The last line is a one-line JSON summary."""
import json
import os
import pathlib
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
ACTIVE, SPARES, VICTIM, STEPS, KILL_STEP = 4, 1, 2, 40, 20
ARGS = ["--steps", str(STEPS), "--state-mib", "16", "--batch", "256"]


def job(faults: str, show) -> tuple[list[dict], list[str], int, float]:
    """Run the training; call ``show(event)`` for each JSON line as it arrives."""
    env = dict(os.environ)
    if faults:
        env["DPMPI_FAULTS"] = faults
    cmd = [sys.executable, "-m", "dpmpi.run", "-n", str(ACTIVE + SPARES), "--spares", str(SPARES), "--",
           sys.executable, str(HERE / "train_mlp.py"), *ARGS, "--progress"]
    t0 = time.time()
    proc = subprocess.Popen(cmd, env=env, cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    events = []
    for line in proc.stdout:
        if line.startswith("{"):
            event = json.loads(line)
            events.append(event)
            show(event)
    err = proc.stderr.read()
    rc = proc.wait(timeout=60)
    return events, err.splitlines(), rc, time.time() - t0


def fmt_ms(x: float) -> str:
    return f"{x:7.1f} ms"


def main() -> int:
    print(f"dpmpi demo: data-parallel training of an MLP (weights + Adam state: 16 MiB per rank) on {ACTIVE} ranks,")
    print(f"with {SPARES} spare rank waiting. First a failure-free run, for reference; then the same run with")
    print(f"rank {VICTIM} killed by SIGKILL at step {KILL_STEP} of {STEPS}.\n")
    ref, ref_err, ref_rc, ref_wall = job("", lambda e: None)
    ref_final = {e["rank"]: e["digest"] for e in ref if e["event"] == "final"}
    if ref_rc != 0 or len(ref_final) != ACTIVE:
        print("the failure-free run failed:\n" + "\n".join(ref_err[-20:]))
        return 1
    ref_steps = [e for e in ref if e["event"] == "step" and e["rank"] == 0]
    step_ms = 1e3 * (ref_steps[-1]["time"] - ref_steps[0]["time"]) / max(1, len(ref_steps) - 1)
    print(f"failure-free run: {STEPS} steps in {ref_wall:.1f} s (launch included), {step_ms:.0f} ms per step; "
          f"final weights checksum {ref_final[0]}\n")
    print(f"$ DPMPI_FAULTS={VICTIM}:step@{KILL_STEP + 1}:KILL dpmpi-run -n {ACTIVE + SPARES} --spares {SPARES} -- "
          f"python examples/train_mlp.py {' '.join(ARGS)}")
    seen_failure = []

    def show(e: dict) -> None:
        kind, rank = e["event"], e.get("rank")
        if kind == "step" and rank == (VICTIM if seen_failure else 0):
            who = f"rank {rank}" + (" (the spare)" if seen_failure else "")
            print(f"  step {e['step']:3d}  loss {e['loss']:8.4f}   [{who}]")
        elif kind == "failure":
            if not seen_failure:
                print(f"  -- rank {VICTIM} is gone --")
            seen_failure.append(e)
            print(f"  rank {rank}: caught {e['error']} in step {e['step']}")
        elif kind == "repaired" and rank == 0:
            p = e["phases_ms"]
            filled = ", ".join(f"{how} {pid}" for how, pid in e["filled"].values())
            print(f"  communicator repaired (repair {e['repair']}): rank {e['failed']} filled by {filled}, "
                  f"size {e['size']}")
            print("    phases: " + ", ".join(f"{k} {v:.1f} ms" for k, v in p.items()) + f"; total {e['total_ms']:.1f} ms")
        elif kind == "restored":
            d = e.get("detail", {})
            source = "a copy received from its buddy" if d.get("received") else "its own in-memory copy"
            print(f"  rank {rank} ({e['role'].lower()}): restored epoch {e['epoch']} from {source} in "
                  f"{e['restore_ms']:.1f} ms " + "(" + ", ".join(f"{k} {v:.1f}" for k, v in d.get("ms", {}).items())
                  + " ms)")
        elif kind == "caught-up" and rank == 0:
            print(f"  back at step {e['step']} after recomputing {e['steps_recomputed']} step(s) in "
                  f"{e['recompute_ms']:.1f} ms")

    events, err, rc, wall = job(f"{VICTIM}:step@{KILL_STEP + 1}:KILL", show)
    final = {e["rank"]: e for e in events if e["event"] == "final"}
    kills = [json.loads(x.split(" ", 1)[1]) for x in err if x.startswith("[dpmpi-fault]")]
    others = [x for x in err if not x.startswith("[dpmpi-fault]") and x.strip()]
    if rc != 0 or len(final) != ACTIVE or not kills:
        print(f"the run with a failure did not complete (exit code {rc}):\n" + "\n".join(err[-30:]))
        return 1
    kill_t = kills[0]["time"]
    recs = [r for f in final.values() for r in f["recoveries"]]
    resumed = max(r["resumed_at"] for r in recs)
    caught_up = max((r["caught_up_at"] for r in recs if r["caught_up_at"]), default=resumed)
    detect = max(r["caught_at"] for r in recs if r["error"]) - kill_t
    repaired = max(r["repaired_at"] for r in recs) - kill_t
    recovery_ms = 1e3 * (resumed - kill_t)
    lost_steps = max(r["steps_recomputed"] for r in recs)
    identical = all(final[r]["digest"] == ref_final[r] for r in range(ACTIVE))
    spare = final[VICTIM]
    print(f"\nrank {VICTIM} is now world rank {spare['wid']}, the former spare (role {spare['role']}).")
    print("final weights, failure-free run vs this run, per rank:")
    for r in range(ACTIVE):
        print(f"  rank {r}: {ref_final[r]}  {final[r]['digest']}  {'identical' if final[r]['digest'] == ref_final[r] else 'DIFFERENT'}")
    print(f"\ntime from the kill: every survivor knew {fmt_ms(1e3 * detect)}, communicator repaired {fmt_ms(1e3 * repaired)},")
    print(f"every rank stepping again from the restored snapshot {fmt_ms(recovery_ms)} (time to resume),")
    print(f"back where the failure struck {fmt_ms(1e3 * (caught_up - kill_t))} ({lost_steps} whole step(s) recomputed).")
    print(f"run time: {wall:.2f} s with the failure, {ref_wall:.2f} s without (both include launching).")
    if others:
        print(f"({len(others)} line(s) of MPI/stderr output not shown)")
    summary = {"identical": identical, "recovery_ms": round(recovery_ms, 1), "steps_recomputed": lost_steps,
               "detect_ms": round(1e3 * detect, 1), "repaired_ms": round(1e3 * repaired, 1),
               "caught_up_ms": round(1e3 * (caught_up - kill_t), 1)}
    print(json.dumps(summary))
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
