"""dpmpi.Runtime on the two example workloads: killed at seeded random steps, every rank ends bit
for bit where a failure-free run ends (and where the plain mpi4py twin ends)."""
import json
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
STEPS = 30
ARGS = {"mlp": ["--state-mib", 2, "--batch", 32], "jacobi": ["--state-mib", 1, "--width", 256]}
SCRIPT = {"mlp": "train_mlp", "jacobi": "jacobi"}
SEED = 20261129
_reference: dict = {}


def launch(dpmpi_run, workload, n_spares, faults="", env=None):
    args = ["--steps", STEPS, *ARGS[workload]]
    return dpmpi_run(4 + n_spares, str(EXAMPLES / f"{SCRIPT[workload]}.py"), *args,
                     launcher_args=["--spares", str(n_spares)], faults=faults, env=env, timeout=120)


def finals(job):
    assert job.returncode == 0, f"exit code {job.returncode}\n{job.stdout[-3000:]}\n{job.stderr[-3000:]}"
    out = {e["rank"]: e for e in job.events if e["event"] == "final"}
    assert sorted(out) == [0, 1, 2, 3], job.stdout[-3000:] + job.stderr[-3000:]
    assert all(e["step"] == STEPS for e in out.values())
    return {r: e["digest"] for r, e in out.items()}


def reference(dpmpi_run, workload):
    if workload not in _reference:
        _reference[workload] = finals(launch(dpmpi_run, workload, 1))
    return _reference[workload]


# (make test-long: a check of the benches' twin, left out of make test's budget)
@pytest.mark.parametrize("workload", [pytest.param(w, marks=pytest.mark.long) for w in ("mlp", "jacobi")])
def test_the_plain_mpi4py_twin_computes_the_same_state(workload, dpmpi_run, run_job, mpirun):
    cmd = [*mpirun, "-n", "4", sys.executable, str(EXAMPLES / f"{SCRIPT[workload]}_mpi4py.py"), "--steps", str(STEPS),
           *map(str, ARGS[workload])]
    twin = run_job(cmd, timeout=120)
    assert twin.returncode == 0, twin.stderr
    got = {e["rank"]: e["digest"] for e in twin.events if e["event"] == "final"}
    assert got == reference(dpmpi_run, workload)


def kills(victims, seed):
    """A seeded random step for each victim (different steps when there are several)."""
    rng = random.Random(seed)
    steps = sorted(rng.sample(range(3, STEPS - 3), len(victims)))
    return {v: s for v, s in zip(victims, steps)}


# (the MLP in make test-long: make test's budget; Jacobi covers both restore paths, and chaos the MLP)
@pytest.mark.parametrize("workload", [pytest.param("mlp", marks=pytest.mark.long), "jacobi"])
@pytest.mark.parametrize("victims", [(0,), pytest.param((2,), marks=pytest.mark.long),
                                     pytest.param((1, 3), marks=pytest.mark.long)],
                         ids=["rank0", "middle", "two-ranks"])  # (long: make test's budget)
def test_killed_at_a_random_step_ends_identical_to_a_failure_free_run(workload, victims, dpmpi_run):
    plan = kills(victims, SEED + sum(victims) + len(workload))
    # faults.point("step") is hit once per step: the k-th hit is step k - 1
    faults = ",".join(f"{v}:step@{s + 1}:KILL" for v, s in plan.items())
    # rank 0 killed: survivors copy their arrays back (exchanges off); otherwise they exchange pages
    # with their copy (restore(swap=True) from 64 KiB on), the copy refilled in the background
    swap = victims != (0,)
    job = launch(dpmpi_run, workload, len(victims), faults, env={"DPMPI_SWAP_MIN": "65536" if swap else "0"})
    assert finals(job) == reference(dpmpi_run, workload), f"kill plan {plan}"
    # every process ends cleanly: no survivor left to dpmpi's Finalize watchdog (when MPI_Finalize
    # still ran its PMIx fence after a failure, 4 of 20 recovered runs of a stranger program ended
    # that way; dpmpi_c.c's end_mpi skips the fence after a failure)
    assert "did not return in time" not in job.stderr, job.stderr[-3000:]
    restored = [e for e in job.events if e["event"] == "restored"]
    assert restored, job.stdout[-2000:]
    for e in restored:  # snapshots every step: at most one whole step is recomputed
        assert 0 <= e["steps_recomputed"] <= 1, (plan, e)
        d = e["detail"]
        from_own = not d.get("received") and not d.get("kept") and not d.get("from_disk")
        assert (d.get("swapped_mib", 0) > 0) == (swap and from_own), (plan, e)
    if len(victims) == 1:  # every rank, the replacement too, knows the same failed step: the
        # furthest a survivor got (the victim dies at the start of its step; a survivor may
        # still be finishing the one before)
        failed = {e["failed_step"] for e in restored}
        (step,) = plan.values()
        assert len(failed) == 1 and failed <= {step - 1, step}, (plan, restored)
        assert len(restored) == 4, restored
    # the victims' places are held by spares (world ranks 4 and up) at the end
    replaced = {e["rank"] for e in job.events if e["event"] == "final" and e["wid"] >= 4}
    assert replaced == set(plan), (plan, replaced)


def test_confirmed_steps_end_identical_with_a_rank_killed(dpmpi_run):
    # confirm_steps (on by default across nodes): an agreement ends each step's update
    job = dpmpi_run(5, str(EXAMPLES / "train_mlp.py"), "--steps", STEPS, *ARGS["mlp"], "--confirm-steps",
                    launcher_args=["--spares", "1"], faults="2:step@12:KILL", timeout=120)
    assert finals(job) == reference(dpmpi_run, "mlp")
    final = {e["rank"]: e for e in job.events if e["event"] == "final"}
    assert all(e["confirmed"] >= STEPS - 12 for e in final.values()), final  # the replacement too
    assert final[2]["wid"] == 4


@pytest.mark.long  # (make test's budget: test_hotswap's second failures inside the repair's Shrink and agreement stay)
def test_a_second_failure_during_the_recovery(dpmpi_run):
    # rank 3 (not the buddy holding rank 1's copy) dies inside the repair that replaces rank 1
    job = launch(dpmpi_run, "jacobi", 2, "1:step@10:KILL,3:repair@1:KILL")
    assert finals(job) == reference(dpmpi_run, "jacobi")
    final = {e["rank"]: e for e in job.events if e["event"] == "final"}
    assert final[1]["wid"] >= 4 and final[3]["wid"] >= 4


def test_a_rank_dying_after_its_last_step_is_recovered_too(dpmpi_run):
    # rank 2 dies between its last update and the runtime's final commit ("run-end")
    job = launch(dpmpi_run, "jacobi", 1, "2:run-end@1:KILL")
    assert finals(job) == reference(dpmpi_run, "jacobi")
    assert {e["rank"] for e in job.events if e["event"] == "restored"} == {0, 1, 2, 3}


@pytest.mark.long  # (make test's budget)
def test_a_mark_kept_outside_the_state_writes_each_steps_output_once(dpmpi_run):
    """docs/runtime.md's advice for output: written before rt.update(), since the steps after the
    restored epoch are redone, and a mark outside the state (not rolled back) keeps rank 0 from
    writing them twice; without it the redone steps it had written come out twice."""
    def logged(*args):
        job = dpmpi_run(5, "step_log.py", *args, launcher_args=["--spares", "1"], faults="2:step@36:KILL")
        assert job.returncode == 0, job.stdout + job.stderr
        history = next(e for e in job.events if e["event"] == "history")["recoveries"]
        assert len(history) == 1 and history[0][1] <= 30 and history[0][0] >= 35, history  # (30-34 redone)
        return [e["step"] for e in job.events if e["event"] == "logged"]

    assert logged() == list(range(60))
    twice = logged("no-mark")
    assert sorted(set(twice)) == list(range(60)) and {30, 31, 32, 33} <= {k for k in twice if twice.count(k) == 2}, twice


def test_a_warm_spare_cannot_replace_a_rank_whose_starting_state_was_never_replicated(dpmpi_run):
    # the examples' spares are warm (dpmpi.init(wait=False)): their arrays are built for another
    # rank, so a rank killed before its first snapshot left its buddy is lost; every rank must say
    # so and end (it hung before). Cold spares start again: test_faults.py, the ring.
    job = launch(dpmpi_run, "jacobi", 1, "1:run-start@1:KILL")
    assert job.returncode != 0, job.stderr
    lost = [line for line in job.stderr.splitlines() if line.startswith("dpmpi.snapshot.errors.SnapshotLostError")]
    assert len(lost) == 4 and all("starting state of rank(s) [1] is lost" in line for line in lost), job.stderr


def test_a_warm_spare_replaces_a_rank_dying_before_the_first_snapshot_when_every_rank_starts_the_same(dpmpi_run):
    # Runtime(same_start=True) (the MLP examples declare it: one seed for every rank's weights):
    # the warm spare's arrays are the dead rank's starting state, so epoch 0 is taken again with
    # them (without it: the SnapshotLostError of the test above)
    job = dpmpi_run(4, "same_start.py", launcher_args=["--spares", "1"], faults="1:run-start@1:KILL", timeout=60)
    assert job.returncode == 0 and "Traceback" not in job.stderr, job.stderr
    final = job.by_rank("final")
    assert [e["w"] for e in final.values()] == [[7.0] * 8] * 3, job.stdout
    assert (final[1]["wid"], final[1]["role"]) == (3, "RECOVERED")


def test_same_start_is_checked_at_the_first_snapshot(dpmpi_run):
    same = dpmpi_run(2, "same_start.py")
    assert same.returncode == 0, same.stderr
    assert [e["w"] for e in same.by_rank("final").values()] == [[7.0] * 8] * 2
    differ = dpmpi_run(3, "same_start.py", "--differ")
    assert differ.returncode == 0 and "Traceback" not in differ.stderr, differ.stderr  # (each rank caught it)
    refused = differ.by_rank("refused")
    assert sorted(refused) == [0, 1, 2], differ.stdout + differ.stderr[-2000:]
    assert all("same_start=True): the starting arrays of rank(s) [1, 2] differ" in e["error"]
               for e in refused.values())


# (make test-long: a check of the benches' twin, left out of make test's budget)
@pytest.mark.parametrize("workload", [pytest.param(w, marks=pytest.mark.long) for w in ("mlp", "jacobi")])
def test_no_spare_a_respawned_process_restores_and_ends_identical(workload, dpmpi_run):
    job = launch(dpmpi_run, workload, 0, "2:step@13:KILL", env={"DPMPI_ON_DEPLETED": "respawn"})
    assert finals(job) == reference(dpmpi_run, workload)
    final = {e["rank"]: e for e in job.events if e["event"] == "final"}
    assert (final[2]["wid"], final[2]["role"]) == (4, "RECOVERED")  # a new process, started by the repair


def test_runtime_refuses_bad_use_with_clear_errors(tmp_path):
    code = textwrap.dedent("""
        import json, numpy as np, dpmpi
        from dpmpi import epochs
        comm = dpmpi.init()
        out = {}
        def err(fn):
            try:
                fn()
            except Exception as exc:
                return f"{type(exc).__name__}: {exc}"
        w = np.zeros(8)
        out["plain"] = err(lambda: dpmpi.Runtime(dpmpi.COMM_WORLD, {"w": w}))
        out["every"] = err(lambda: dpmpi.Runtime(comm, {"w": w}, snapshot_every=0))
        rt = dpmpi.Runtime(comm, {"w": w})
        out["outside"] = err(lambda: rt.update().__enter__())
        out["no-update"] = err(lambda: rt.run(lambda k: None, 3))
        out["steps"] = err(lambda: rt.run(lambda k: None, -1))
        def twice(k):
            with rt.update():
                pass
            with rt.update():
                pass
        out["twice"] = err(lambda: rt.run(twice, 3))
        def good(k):
            with rt2.update():
                w[:] += k
        rt2 = dpmpi.Runtime(comm, {"w": np.zeros(8)})
        w = rt2.snapshot.arrays["w"]
        out["good"] = rt2.run(good, 5) == [] and w.tolist() == [10.0] * 8 and rt2.snapshot.epoch == epochs.after(5)
        print(json.dumps(out))
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["plain"].startswith("TypeError: Runtime needs the communicator returned by dpmpi.init()")
    assert out["every"].startswith("ValueError: snapshot_every must be an int >= 1")
    assert out["outside"].startswith("RuntimeError: rt.update() is for use inside the step function")
    assert out["no-update"].startswith("RuntimeError: step 0 did not modify the state inside 'with rt.update():'")
    assert out["steps"].startswith("ValueError: n_steps must be an int >= 0")
    assert out["twice"].startswith("RuntimeError: step 0 entered rt.update() twice")
    assert out["good"] is True


@pytest.mark.parametrize("how", [["--all", "--no-interrupt"], pytest.param(["--all"], marks=pytest.mark.long),
                                 pytest.param([], marks=pytest.mark.long)],  # (make test's budget)
                         ids=["all-uninterrupted", "all", "call"])
def test_a_failure_the_step_caught_itself_is_recovered_at_that_steps_end(how, dpmpi_run):
    """The step swallows the failure (``except Exception``: around its Allreduce, or around the
    whole step with rt.update()): the Runtime still recovers at the end of that step. Before, a
    survivor whose step was not interrupted by the failure watcher (seen in MPI calls only:
    Runtime(interrupt=False), or a rank that learnt of it from a revoke) went on stepping on the
    revoked communicator while its peers waited in the repair: the job hung (1 of 1 here; 65
    steps in bench/strangers/swallow.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent / "programs"))
    import swallowing

    steps = 12
    args = ["--steps", steps, *how]
    # 30 ms into step 5, while the others sleep inside the try: a kill at the step's start could be
    # noticed while a loaded survivor was still in step 4's update, and then nothing was swallowed
    # (1 of 5 make test-long runs under load)
    job = dpmpi_run(5, "swallowing.py", *args, launcher_args=["--spares", "1"], faults="1:step@5+0.03:KILL")
    assert job.returncode == 0, f"exit code {job.returncode}\n{job.stdout[-3000:]}\n{job.stderr[-3000:]}"
    out = {e["rank"]: e for e in job.events if e.get("event") == "final"}
    assert sorted(out) == [0, 1, 2, 3], job.stdout[-3000:] + job.stderr[-3000:]
    want = swallowing.expected(steps, 4)
    for r, e in out.items():
        assert e["digest"] == want and e["recoveries"] == 1, (r, e)
        assert len(e["swallowed"]) <= 1, (r, e)  # in the step that failed only, never past it
    assert out[1]["role"] == "RECOVERED" and any(e["swallowed"] for e in out.values()), out


@pytest.mark.long  # (make test's budget: fiftieth session)
def test_an_update_on_a_thread_pool_is_not_cut_while_its_workers_write_the_state(dpmpi_run):
    """The update waits in ``Future.result()`` for a worker that adds to the state in passes; rank
    1 dies 0.1 s into step 5, when the survivors are half-way through theirs. Before, the failure
    watcher interrupted their wait: the worker went on adding into the state the restore had
    just written back, and the job ended with other results on each rank, exit code 0 and no
    error (bench/strangers/thread_pool.py with 60 passes, a kill 0.2 s into a step). Now a failure
    noticed inside ``rt.update()`` is raised at its end."""
    job = dpmpi_run(5, "pool_update.py", launcher_args=["--spares", "1"], faults="1:step@5+0.1:KILL", timeout=60)
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    final = job.by_rank("final")
    assert sorted(final) == [0, 1, 2, 3], job.stdout[-3000:] + job.stderr[-3000:]
    assert all(f["ok"] and f["recoveries"] == 1 for f in final.values()), final
    assert final[1]["role"] == "RECOVERED", final


@pytest.mark.long  # (make test's budget: fresh-clone runs took 155-192 s)
def test_an_idle_spare_is_not_ended_by_the_stall_watchdog(dpmpi_run):
    """DPMPI_STALL_TIMEOUT ended every spare that had waited that long (an idle spare makes no
    progress outside MPI calls, by design): the hang of rank 1 at step 8 (~0.8 s in, its stall
    noticed ~1 s later; the spare waited since the start) then found no
    spare, the job went on with 3 ranks and other results, exit code 0 (a stranger's program,
    bench/strangers/mp_loader.py, with DPMPI_STALL_TIMEOUT=3). Now the spare's wait counts as a
    call in progress: the watchdog ends the hung rank only, and the spare takes its place."""
    job = dpmpi_run(5, "pool_update.py", "--passes", 10, launcher_args=["--spares", "1"], faults="1:step@8:HANG",
                    env={"DPMPI_STALL_TIMEOUT": "1"}, timeout=60)
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    final = job.by_rank("final")
    assert sorted(final) == [0, 1, 2, 3] and final[1]["role"] == "RECOVERED", job.stdout + job.stderr[-3000:]
    assert all(f["ok"] and f["recoveries"] == 1 for f in final.values()), final
    assert job.stderr.count("made no progress") == 1 and "rank 1 made no progress" in job.stderr, job.stderr


def test_runs_of_two_runtimes_that_alternate_are_refused(dpmpi_run):
    """Two Runtimes over two models, run in alternate rounds: a recovery restores the arrays of
    the Runtime whose run is in progress only, and a replacement took the other's epoch 0 while
    its survivors stepped (a stranger's program hung at its first failure). Now the second
    round's first run raises on every rank, failure-free, before any MPI call."""
    job = dpmpi_run(5, "two_models.py", launcher_args=["--spares", "1"], timeout=60)
    assert job.returncode not in (0, 124), job.stdout[-3000:] + job.stderr[-3000:]
    refused = job.by_rank("refused")
    assert sorted(refused) == [0, 1, 2, 3] and all(e["round"] == 2 for e in refused.values()), job.stdout
    assert all("another dpmpi.Runtime ran on this communicator" in e["error"] for e in refused.values()), refused
