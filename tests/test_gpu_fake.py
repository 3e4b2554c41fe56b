"""The GPU path (dpmpi.gpu.NcclComm) on the fake backend: the same code as on a GPU, with host
buffers and MPI messages standing in for device arrays and NCCL. Each test is a dpmpi-run job of
tests/programs/gpu_nccl.py with a hard timeout, judged from the ranks' JSON lines and the job's
exit code. Tests that need a real GPU are marked ``gpu`` and skipped without one."""
import pytest

ITERS = 20
FAKE = {"DPMPI_GPU_BACKEND": "fake"}
KILL_IN_ALLREDUCE = "1:nccl-Allreduce-enqueued@10:KILL"  # rank 1 dies with its part of an allreduce posted


def run(dpmpi_run, n, spares=0, faults="", env=None, *args):
    launcher = ["--spares", str(spares)] if spares else []
    return dpmpi_run(n, "gpu_nccl.py", "--iters", ITERS, *args, faults=faults, env={**FAKE, **(env or {})},
                     launcher_args=launcher, timeout=60)


def check(job, n_active, replaced=None, survivors=None):
    """Every logical rank finished every iteration with right sums over one NCCL id per
    generation; each survivor caught the failure and holds the rebuilt communicators."""
    assert job.returncode == 0, f"exit code {job.returncode}\n{job.stdout}\n{job.stderr[-4000:]}"
    assert not [e for e in job.events if e["event"].startswith("wrong")], job.stdout
    done = job.by_rank("done")
    assert sorted(done) == list(range(n_active)), job.stdout + job.stderr[-3000:]
    assert all(e["iterations"] == ITERS and e["size"] == n_active for e in done.values())
    for rank, wid in (replaced or {}).items():
        assert (done[rank]["wid"], done[rank]["role"]) == (wid, "RECOVERED")
    if survivors is not None:
        caught = {e["wid"]: e for e in job.events if e["event"] == "caught"}
        assert sorted(caught) == sorted(survivors), job.stdout  # every survivor saw it: none hung
        assert all(e["error"] in ("ProcFailedError", "RevokedError") for e in caught.values())
        # the NCCL communicator the failure struck was aborted (the other one at repair_begins)
        assert all(e["aborted"] or e["half_aborted"] for e in caught.values())
        rebuilt = [e for e in job.events if e["event"] == "rebuilt"]
        last = {e["wid"]: e for e in rebuilt}
        assert sorted(last) == sorted(survivors)
        uids = {e["uid"] for e in last.values()}
        assert len(uids) == 1 and uids.isdisjoint(e["first_uid"] for e in last.values())  # a fresh id
        assert all(e["rebuilds"] >= 1 and e["half_rebuilds"] >= 1 for e in last.values())
    return done


def test_bootstrap_and_every_operation(dpmpi_run):
    job = run(dpmpi_run, 3, 0, "", None, "--ops")
    check(job, 3)
    boot = job.by_rank("bootstrap")
    assert [boot[r]["nccl_rank"] for r in range(3)] == [0, 1, 2]  # the dpmpi communicator's numbers
    assert len({e["uid"] for e in boot.values()}) == 1
    assert boot[0]["half_uid"] == boot[2]["half_uid"] != boot[1]["half_uid"]  # Split: one id per colour
    assert [boot[r]["half_size"] for r in range(3)] == [2, 1, 2]
    assert {r: e["bad"] for r, e in job.by_rank("ops").items()} == {0: [], 1: [], 2: []}


@pytest.mark.parametrize("watch", ["1", pytest.param("0", marks=pytest.mark.long)])  # (make test's budget)
def test_peer_killed_inside_allreduce_spare_takes_over(dpmpi_run, watch):
    """watch=0: no failure watcher; the MPI-side probe (ULFM) ends the survivors' waits."""
    job = run(dpmpi_run, 5, 1, KILL_IN_ALLREDUCE, {"DPMPI_WATCH": watch})
    check(job, 4, replaced={1: 4}, survivors=[0, 2, 3])


@pytest.mark.parametrize("policy", [pytest.param("respawn", marks=pytest.mark.long), "shrink"])  # (the budget)
def test_peer_killed_inside_allreduce_no_spare(dpmpi_run, policy):
    """respawn: a process started by the repair takes rank 1; shrink: 2 ranks go on, renumbered,
    the NCCL communicators rebuilt at the new size."""
    job = run(dpmpi_run, 3, 0, KILL_IN_ALLREDUCE, {"DPMPI_ON_DEPLETED": policy})
    if policy == "respawn":
        check(job, 3, replaced={1: 3}, survivors=[0, 2])
    else:
        check(job, 2, survivors=[0, 2])
        assert {e["wid"]: (e["rank"], e["size"]) for e in job.events if e["event"] == "rebuilt"} == {0: (0, 2), 2: (1, 2)}


def test_second_failure_during_the_rebuild(dpmpi_run):
    """Rank 2 dies as the survivors bootstrap the new NCCL communicator (its 3rd init: the
    first two were the bootstrap and the split): the repair fails and is repeated."""
    job = run(dpmpi_run, 6, 2, f"{KILL_IN_ALLREDUCE},2:nccl-init@3:KILL")
    check(job, 4, replaced={2: 5})
    assert job.by_rank("done")[1]["wid"] == 4
    assert [e for e in job.events if e["event"] in ("respawn-failed", "build-failed")], job.stdout
    assert {e["repairs"] for e in job.by_rank("done").values()} == {2}


@pytest.mark.long  # (make test's time budget; make test-long runs it)
def test_nccl_faults_without_a_death(dpmpi_run):
    """Nobody dies: rank 0's NCCL reports an async error (its 12th collective), later rank 1's 30th
    collective never runs (the deadline ends it). Each time the rank that sees it aborts and
    revokes its probe, every rank's wait ends, every rank aborts, a repair with no failed rank
    rebuilds NCCL; the job completes."""
    faults = "0:collective@12:ASYNC_ERROR,1:collective@30:HANG"
    # (3 s: a healthy collective on a loaded machine stays well inside it)
    job = run(dpmpi_run, 3, 0, "", {"DPMPI_GPU_FAKE_FAULTS": faults, "DPMPI_GPU_TIMEOUT": "3"})
    check(job, 3, survivors=[0, 1, 2])
    messages = [e["message"] for e in job.events if e["event"] == "caught"]
    assert any("asynchronous error" in m for m in messages) and any("did not complete within 3 s" in m for m in messages)
    assert len({e["repairs"] for e in job.by_rank("done").values()}) == 1
    assert job.by_rank("done")[0]["repairs"] >= 2


@pytest.mark.long  # (make test's budget: fiftieth session)
def test_hung_abort_ends_that_process(dpmpi_run):
    """Rank 2's abort hangs after rank 1's death: the abort deadline ends rank 2, a second spare
    takes its place."""
    job = run(dpmpi_run, 6, 2, KILL_IN_ALLREDUCE, {"DPMPI_GPU_FAKE_FAULTS": "2:abort@1:HANG",
                                                   "DPMPI_GPU_REBUILD_TIMEOUT": "1.5"})
    check(job, 4)
    assert "ncclCommAbort did not return within 1.5 s" in job.stderr
    assert sorted(e["wid"] for e in job.by_rank("done").values()) == [0, 3, 4, 5]


def _gpu_available():
    """Two ranks can share NCCL on this machine: two GPUs, or one GPU and NCCL >= 2.30.3 (older
    NCCL refuses two ranks on one device)."""
    try:
        import cupy
        from cupy.cuda import nccl

        devices = cupy.cuda.runtime.getDeviceCount()
        return devices > 1 or (devices == 1 and nccl.get_version() >= 23003)
    except Exception:  # noqa: BLE001 (no CuPy, no driver, no device)
        return False


@pytest.mark.gpu
@pytest.mark.skipif(not _gpu_available(), reason="needs CuPy, NCCL and two GPUs, or one GPU and NCCL >= 2.30.3")
def test_cupy_backend_bootstrap_and_kill(dpmpi_run):
    """On a GPU (2 ranks + 1 spare on one device): the same bootstrap and kill as above, CuPy's NCCL."""
    env = {"DPMPI_GPU_BACKEND": "cupy", "NCCL_MULTI_RANK_GPU_ENABLE": "1"}
    job = dpmpi_run(3, "gpu_nccl.py", "--iters", ITERS, faults=KILL_IN_ALLREDUCE, env=env,
                    launcher_args=["--spares", "1"], timeout=120)
    check(job, 2, replaced={1: 2}, survivors=[0])


def _mlp(dpmpi_run, faults="", *, n=5, env=FAKE, args=()):
    from pathlib import Path

    example = Path(__file__).resolve().parent.parent / "examples" / "train_mlp_cupy.py"
    job = dpmpi_run(n, str(example), "--steps", 24, *args, faults=faults, launcher_args=["--spares", "1"],
                    timeout=90, env={**env, "OPENBLAS_NUM_THREADS": "1"})  # small matrices: one BLAS thread each
    assert job.returncode == 0, f"exit code {job.returncode}\n{job.stdout[-3000:]}\n{job.stderr[-3000:]}"
    final = job.by_rank("final")
    assert sorted(final) == list(range(n - 1)) and all(e["step"] == 24 for e in final.values()), job.stdout[-3000:]
    return final


def _one_gpu():
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() >= 1
    except Exception:  # noqa: BLE001 (no CuPy, no driver, no device)
        return False


@pytest.mark.parametrize("backend", [pytest.param("fake", marks=pytest.mark.long),  # (make test's budget)
                                     pytest.param("cupy", marks=[pytest.mark.gpu, pytest.mark.skipif(
                                         not _one_gpu(), reason="needs CuPy and a CUDA GPU")])])
def test_train_mlp_cupy_example_with_mpi_gradients_ends_bit_identical(dpmpi_run, backend):
    """The example's device state, snapshots and restore with the gradients averaged over MPI
    through host memory (--allreduce mpi): on one GPU this runs whatever the NCCL version (NCCL
    before 2.30.3 refuses two ranks on one GPU). 2 ranks + 1 warm spare, rank 1 SIGKILLed in
    step 13; the digests equal a failure-free run's."""
    env = {"DPMPI_GPU_BACKEND": backend}
    reference = {r: e["digest"] for r, e in _mlp(dpmpi_run, n=3, env=env, args=("--allreduce", "mpi")).items()}
    final = _mlp(dpmpi_run, "1:step@13:KILL", n=3, env=env, args=("--allreduce", "mpi"))
    assert {r: e["digest"] for r, e in final.items()} == reference
    assert (final[1]["wid"], final[1]["role"], final[1]["backend"]) == (2, "RECOVERED", backend)
    assert len(final[0]["recoveries"]) == 1


def test_train_mlp_cupy_example_killed_inside_allreduce_ends_bit_identical(dpmpi_run):
    """examples/train_mlp_cupy.py (device state, NCCL gradients, Runtime) on the fake backend:
    rank 2 dies inside its 13th allreduce; the spare restores from the device snapshots and the
    final state equals a failure-free run's bit for bit."""
    reference = {r: e["digest"] for r, e in _mlp(dpmpi_run).items()}
    final = _mlp(dpmpi_run, "2:nccl-Allreduce-enqueued@13:KILL")
    assert {r: e["digest"] for r, e in final.items()} == reference
    assert (final[2]["wid"], final[2]["role"]) == (4, "RECOVERED")
    for r in (0, 1, 3):
        assert final[r]["nccl_rebuilds"] == 1 and len(final[r]["recoveries"]) == 1
        rec = final[r]["recoveries"][0]
        # a survivor whose step-12 allreduce had all of rank 2's data completes it (whole results
        # win) and fails in step 13; epoch 12 (the state after step 11) is restored if its
        # replication had ended, else 11. A survivor still finishing step 11 (descheduled on a
        # busy node while rank 2 went on) is interrupted there by the watcher: epoch 11 or 10
        # (seen once in a fresh-clone make test; the digests were equal)
        allowed = {11: (10, 11), 12: (11, 12), 13: (11, 12)}
        assert rec["restored_epoch"] in allowed.get(rec["failed_step"], ()), rec
