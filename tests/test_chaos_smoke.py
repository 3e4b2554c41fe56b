"""A short chaos smoke through dpmpi-bench chaos's Python API (dpmpi.bench.chaos): two runs with fixed seeds, one
SIGKILL each from outside at a seeded random time, on the primitives workload (init, Respawn,
Snapshot) and on a Runtime workload (Jacobi; in ``make test-long`` only). Every run must end ``ok``: exit code 0, every
rank's final state bit for bit a failure-free run's, and no error on stderr that the victim
did not cause. Each job has a hard timeout (a hang is a verdict, and the job's session is
killed); the whole test has one too."""

import pytest

from dpmpi.bench import chaos

# (workload, its arguments: short runs, about 1 s of steps here, plan duration s, run seeds)
CASES = [
    # (both in make test-long only since the thirty-seventh session: make test's time budget; the
    # chaos logic is in test_chaos_logic.py, the Runtime under in-process kills in test_workloads.py)
    pytest.param("primitives", ["--steps", "100", "--step-ms", "10"], 1.2, [14], marks=pytest.mark.long),  # rank 2
    pytest.param("jacobi", ["--steps", "150", "--state-mib", "1", "--width", "256"], 0.8, [8], marks=pytest.mark.long),  # rank 1
]


@pytest.mark.timeout(150)
@pytest.mark.parametrize("workload, args, duration, seeds", CASES, ids=["primitives", "jacobi"])
def test_one_kill_from_outside_ends_ok(workload, args, duration, seeds):
    lines = []
    harness = chaos.Harness(log=lines.append)
    cfg = chaos.Config(workload, kills=1, signals=["KILL"], ranks=4, spares=1, timeout=30, args=args)
    results = [harness.run(cfg, seed, i, duration=duration) for i, seed in enumerate(seeds)]
    for r in results:
        assert [k["sent"] for k in r["kills"]] == [True], r["kills"]  # the victim was found and killed
        assert r["processes"]["world"].keys() == set(range(5))  # every world rank seen from outside
    bad = [f"{r['verdict']} (seed {r['seed']}): {r['reasons']}\n  replay: {r['replay']}" for r in results
           if r["verdict"] != "ok"]
    assert not bad, "\n".join(bad) + "\n" + "\n".join(lines)
