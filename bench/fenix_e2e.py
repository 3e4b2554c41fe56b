"""Fenix beside dpmpi: the e2e recovery setup (4 active ranks + 1 spare, 64 MiB of state per
rank, a snapshot every step, one rank SIGKILLed at a point spread over the step) written with
Fenix (bench/fenix/fenix_e2e.c), to compare "kill -> back where it failed" with
`dpmpi-bench e2e --kill-at ...` on the same machine.

dpmpi ships no Fenix code: pass a Fenix checkout (https://github.com/sandialabs/Fenix); this
script builds it with the MPI of dpmpi's environment (cmake, mpicc) under bench/results/.

    .venv/bin/python bench/fenix_e2e.py --fenix-src ~/Fenix --step-ms 250 --kills 8

Per kill: the victim writes its kill time (and its offset in the step) to a file; after Fenix's recovery every rank prints when it is back
at the start of the step the kill hit; "kill -> back where it failed" adds the kill's offset in the
step (the part to redo). The final state of every rank must equal a failure-free run's, bit for
bit. Open MPI 5.0.11's MPI_Finalize hangs after a failure under plain mpirun, so the job is ended
once every rank printed its final state. Results: bench/results/fenix_e2e.json.
"""
from __future__ import annotations

import argparse
import json
import os
import select
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
EXTRA_ENV: dict[str, str] = {}  # e.g. Open MPI's event tick (--event-tick-us)


def build(src: Path, out: Path) -> Path:
    """Fenix (static library) and fenix_e2e, built with dpmpi's mpicc; the program's path."""
    build_dir = out / "fenix-build"
    build_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    subprocess.run(["cmake", str(src), f"-DCMAKE_C_COMPILER={BIN / 'mpicc'}", "-DBUILD_TESTING=OFF", "-DBUILD_DOCS=OFF",
                    "-DCMAKE_BUILD_TYPE=Release"], cwd=build_dir, env=env, check=True, capture_output=True)
    subprocess.run(["make", "-j2", "fenix"], cwd=build_dir, env=env, check=True, capture_output=True)
    prog = out / "fenix_e2e"
    subprocess.run([str(BIN / "mpicc"), "-O2", "-o", str(prog), str(ROOT / "bench" / "fenix" / "fenix_e2e.c"),
                    f"-I{src / 'include'}", f"-I{build_dir / 'include'}", f"-L{build_dir / 'src'}", "-lfenix", "-lm"],
                   env=env, check=True, capture_output=True)
    return prog


def run(prog: Path, n_active: int, mib: float, steps: int, step_ms: float, victim: int, kill_step: int,
        offset: float, timeout: float, passes: int = 0) -> list[dict]:
    """One job; its JSON lines (the job is ended once every active rank printed "final")."""
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", **EXTRA_ENV}
    kill_file = prog.parent / "fenix_e2e.kill"
    kill_file.unlink(missing_ok=True)
    cmd = [str(BIN / "mpirun"), "--with-ft", "ulfm", "--oversubscribe", "-n", str(n_active + 1), str(prog),
           f"{mib:g}", str(steps), f"{step_ms:g}", str(victim), str(kill_step), f"{offset:.4f}", str(kill_file), str(passes)]
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    events, deadline, buf = [], time.monotonic() + timeout, b""
    try:
        assert job.stdout is not None
        fd = job.stdout.fileno()
        while time.monotonic() < deadline and sum(e["event"] == "final" for e in events) < n_active:
            ready, _w, _x = select.select([fd], [], [], 0.1)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            events += [json.loads(x) for x in lines if x.startswith(b"{")]
    finally:
        try:
            os.killpg(job.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        job.wait()
    if kill_file.exists():
        events += [json.loads(x) for x in kill_file.read_text().splitlines() if x.startswith("{")]
    return events


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fenix-src", type=Path, required=True, help="a Fenix checkout")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--state-mib", type=float, default=64)
    ap.add_argument("--step-ms", type=float, default=250, help="the step to calibrate to (the dpmpi twin's)")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--kill-step", type=int, default=6)
    ap.add_argument("--kills", type=int, default=8)
    ap.add_argument("--kill-at", default="0,0.25,0.5,0.75", help="fractions of the step, taken in turn")
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--event-tick-us", type=int, default=0,
                    help="Open MPI's mpi_event_tick_rate for the Fenix jobs (dpmpi sets 1000; 0: Open MPI's default)")
    a = ap.parse_args()
    if a.event_tick_us:
        EXTRA_ENV["OMPI_MCA_mpi_event_tick_rate"] = str(a.event_tick_us)
    a.out.mkdir(parents=True, exist_ok=True)
    prog = build(a.fenix_src.resolve(), a.out)
    fracs = [float(x) for x in a.kill_at.split(",")]
    ref = run(prog, a.ranks, a.state_mib, a.steps, a.step_ms, -1, a.kill_step, 0.0, a.timeout)
    want = {e["rank"]: e["digest"] for e in ref if e["event"] == "final"}
    passes = max((e["passes"] for e in ref if e["event"] == "final"), default=0)  # the same work in every job
    if len(want) != a.ranks:
        raise SystemExit(f"fenix_e2e: the failure-free run did not finish: {ref}")
    kills = []
    for i in range(a.kills):
        victim, frac = i % a.ranks, fracs[i % len(fracs)]
        ev = run(prog, a.ranks, a.state_mib, a.steps, a.step_ms, victim, a.kill_step, frac * a.step_ms / 1e3, a.timeout,
                 passes)
        kill = next((e for e in ev if e["event"] == "kill"), None)
        back = [e for e in ev if e["event"] == "back" and e["step"] == a.kill_step]  # (the step the kill hit)
        finals = {e["rank"]: e["digest"] for e in ev if e["event"] == "final"}
        if kill is None or len(back) != a.ranks or finals != want:
            kills.append({"victim": victim, "frac": frac, "error": "incomplete or wrong state", "events": ev[-8:]})
            continue
        at_start = max(e["time"] for e in back) - kill["time"]
        kills.append({"victim": victim, "frac": frac, "offset_ms": round(1e3 * kill["offset"], 1),
                      "back_at_step_start_ms": round(1e3 * at_start, 1),
                      "back_where_it_failed_ms": round(1e3 * (at_start + kill["offset"]), 1), "bit_for_bit": True})
        print(json.dumps(kills[-1]), flush=True)
    ok = [k for k in kills if "error" not in k]
    summary = {"ranks": a.ranks, "spares": 1, "state_mib": a.state_mib, "step_ms": a.step_ms, "passes": passes,
               "event_tick_us": a.event_tick_us or None,
               "kills": len(kills),
               "ok": len(ok), "cores": os.cpu_count(),
               "median_back_at_step_start_ms": statistics.median(k["back_at_step_start_ms"] for k in ok) if ok else None,
               "median_back_where_it_failed_ms": statistics.median(k["back_where_it_failed_ms"] for k in ok) if ok else None}
    (a.out / "fenix_e2e.json").write_text(json.dumps({"summary": summary, "kills": kills}, indent=1))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
