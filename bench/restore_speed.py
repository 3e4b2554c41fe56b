"""Restore speed into arrays whose pages were never written vs arrays written before.

    .venv/bin/python bench/restore_speed.py [--state-mib 64] [--repeats 3] [--out bench/results/restore_speed.json]

Each job: dpmpi-run -n 3 --spares 1 (2 active ranks + a cold spare), dpmpi.Runtime over one
array of --state-mib made with np.zeros; "touched": every element written once before the run;
"untouched": never written (no pages yet) except one element per step. Rank 1 is killed at
step 4; the spare replaces it and every rank restores. Reported: the restore's "copy" phase
(writing the snapshot back into the arrays) per rank, median over the repeats, per variant, and
the ratio untouched / touched (1.0: restore at memory speed whatever the arrays). Before dpmpi
pre-faulted registered arrays (MADV_POPULATE_WRITE at Snapshot(...)), this copy took 433-543 ms
into untouched 64 MiB arrays against 28 ms into touched ones (issue 13).
"""
import argparse
import json
import os
import pathlib
import statistics
import sys

from _jobs import run_job

ROOT = pathlib.Path(__file__).resolve().parent.parent
BIN = pathlib.Path(sys.executable).parent


def one(state_mib: float, touched: int) -> list[dict]:
    env = dict(os.environ, DPMPI_FAULTS="1:step@4:KILL")
    cmd = [str(BIN / "dpmpi-run"), "-n", "3", "--spares", "1", "--", str(BIN / "python"),
           str(ROOT / "bench" / "_restore_prog.py"), "--state-mib", str(state_mib), "--touched", str(touched)]
    res = run_job(cmd, env, str(ROOT), 120)
    if res is None:
        raise SystemExit(f"hang: {' '.join(cmd)}")
    rc, out, err = res
    if rc != 0:
        raise SystemExit(f"job failed (exit {rc}):\n{err[-2000:]}")
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--state-mib", type=float, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "restore_speed.json"))
    a = ap.parse_args()
    runs: dict[str, list] = {"untouched": [], "touched": []}
    for _ in range(a.repeats):  # interleaved, so both variants see the same machine
        for name, touched in (("untouched", 0), ("touched", 1)):
            runs[name].append(one(a.state_mib, touched))
    summary = {}
    for name, jobs in runs.items():
        copy = [r["restore"]["ms"]["copy"] for job in jobs for r in job]
        total = [r["restore"]["total_ms"] for job in jobs for r in job]
        summary[name] = {"copy_ms_median": round(statistics.median(copy), 1), "copy_ms_max": round(max(copy), 1),
                         "restore_total_ms_median": round(statistics.median(total), 1), "n": len(copy)}
        print(f"{name:>9}: restore copy median {summary[name]['copy_ms_median']} ms (max {summary[name]['copy_ms_max']}),"
              f" whole restore median {summary[name]['restore_total_ms_median']} ms, {len(copy)} rank-restores")
    ratio = summary["untouched"]["copy_ms_median"] / max(summary["touched"]["copy_ms_median"], 1e-3)
    print(f"ratio untouched / touched (copy): {ratio:.2f}  [{a.state_mib} MiB per rank, 2 active + 1 spare on "
          f"{os.cpu_count()} cores]")
    pathlib.Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"argv": sys.argv[1:], "summary": summary, "ratio_copy": round(ratio, 3), "runs": runs}, f, indent=1)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
