"""C programs that know nothing of dpmpi, under dpmpi-run: the preloaded exit guard
(cext/dpmpi_preload.c) gives them status records, failures the others notice, and a Finalize
that ends after a failure. Programs in tests/programs/c, compiled with the venv's mpicc.

A program that is not MPI at all gets a record too, so the job's exit code is its status."""
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
PROGRAMS = Path(__file__).resolve().parent / "programs"
DIRTY = ("OPAL ERROR", "Segmentation fault", "Address not mapped", "MPI_ERRORS_ARE_FATAL")


@pytest.fixture(scope="session")
def cbin(tmp_path_factory):
    out = tmp_path_factory.mktemp("cbin")
    for name in ("shrink", "respawn", "late_fin"):
        subprocess.run([str(BIN / "mpicc"), "-O2", "-o", str(out / name), str(PROGRAMS / "c" / f"{name}.c")],
                       check=True)
    return out


@pytest.fixture
def launch(run_job):
    return lambda n, *program: run_job([str(BIN / "dpmpi-run"), "-n", str(n), "--", *map(str, program)], timeout=60)


def done(job):
    return [e for e in job.events if e.get("event") == "done"]


def clean(job):
    assert not [p for p in DIRTY if p in job.stderr], job.stderr


def test_a_failure_free_c_job_ends_cleanly(cbin, launch):
    job = launch(3, cbin / "shrink", 50)
    assert job.returncode == 0, job.stderr
    assert sorted(e["wid"] for e in done(job)) == [0, 1, 2] and all(e["sum"] == 6 for e in done(job))
    assert not job.accounts() and "Finalize did not return" not in job.stderr
    clean(job)


@pytest.mark.parametrize("how, status", [("kill", 0), ("exit", 0)])
def test_the_survivors_shrink_around_a_c_rank_that_dies(cbin, launch, how, status):
    """SIGKILL, or exit(3) without MPI_Finalize (which ULFM alone never reports: the others
    would wait forever): the survivors notice, shrink (recorded by the guard) and complete."""
    job = launch(3, cbin / "shrink", 50, how, 1, 20)
    assert job.returncode == status, job.stderr
    assert sorted(e["wid"] for e in done(job)) == [0, 2] and all(e["sum"] == 4 and e["shrinks"] == 1 for e in done(job))
    assert "the other 2 rank(s) recovered and completed" in job.stderr
    clean(job)


def test_survivors_that_finalize_after_a_failure_end_with_its_status(cbin, launch):
    """The tutorial's error-handler scenario: no repair, the survivors call MPI_Finalize (which
    can hang upstream after a failure): the job ends, with the failed rank's status."""
    job = launch(3, cbin / "shrink", 50, "exit", 1, 20, "norepair")
    assert job.returncode == 3, job.stderr
    assert sorted(e["wid"] for e in done(job)) == [0, 2]
    assert "rank 1 failed (status 3); no rank that completed repaired around it" in job.stderr
    clean(job)


def test_every_c_rank_killed_fails_the_job(cbin, launch):
    job = launch(2, cbin / "shrink", 50, "kill", -1, 10)
    assert job.returncode != 0 and "every rank died" in job.stderr


def test_a_c_rank_returning_3_after_finalize_sets_the_exit_code(cbin, launch):
    job = launch(2, cbin / "shrink", 20, "finalize-exit", 1)
    assert job.returncode == 3 and "rank 1 failed (status 3)" in job.stderr


def test_a_c_rank_crashing_in_its_mpi_finalize_sets_the_exit_code_and_says_so(cbin, launch):
    """abort() inside the program's own MPI_Finalize, no failure before: "rank 1 died (no status:
    killed by a signal)", exit code 1, before the fifty-second session; now the exit guard's
    status record names the crash and its signal, and the exit code is 128 + 6, as mpirun's."""
    job = launch(2, cbin / "shrink", 20, "finalize-abort", 1)
    assert job.returncode == 134 and sorted(e["wid"] for e in done(job)) == [0, 1], job.stderr
    assert "MPI_Finalize crashed in rank 1 (signal 6), with no failure in the job" in job.stderr, job.stderr


def test_a_c_program_respawns_a_replacement(cbin, launch):
    """The tutorial's respawn scenario: shrink, MPI_Comm_spawn, merge; the spawned process has
    the guard too (its record names no rank of the job)."""
    job = launch(3, cbin / "respawn", 50, 1, 20)
    assert job.returncode == 0, job.stderr
    ends = done(job)
    assert sorted(e["rank"] for e in ends) == [0, 1, 2] and all(e["sum"] == 6 and e["size"] == 3 for e in ends)
    assert [e["child"] for e in ends if e["rank"] == 1] == [1]
    clean(job)


@pytest.mark.parametrize("program, status", [
    (["sh", "-c", "exit 0"], 0),
    (["sh", "-c", "exit 4"], 4),
    # the rank is a Python that `env` execs: it still has dpmpi's guard and its record
    (["env", sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"], 1),
    (["env", sys.executable, "-c", "import sys; sys.exit(5)"], 5),
])
def test_the_exit_code_of_any_program(launch, program, status):
    job = launch(2, *program)
    assert job.returncode == status, job.stderr


@pytest.mark.parametrize("late_filter", ["1", "0"])
def test_a_c_rank_gets_the_filter_of_a_dead_peers_late_messages(cbin, run_job, tmp_path, late_filter):
    """tests/programs/c/late_fin.c: a FIN from a peer that died, handled after Open MPI cancelled
    the send. The preloaded guard's filter drops it and rank 0 ends cleanly; without the filter
    (DPMPI_LATE_FILTER=0) Open MPI mishandles it (see tests/test_faults.py)."""
    import os

    pipe = tmp_path / "go"
    os.mkfifo(pipe)
    job = run_job([str(BIN / "dpmpi-run"), "-n", "2", "--", str(cbin / "late_fin"), str(pipe)],
                  env={"DPMPI_LATE_FILTER": late_filter}, timeout=60)
    assert [e["proc_failed"] for e in done(job)] == [1], job.stdout + job.stderr
    if late_filter == "1":
        clean(job)
        assert "Send error after request freed" not in job.stderr, job.stderr
    else:
        assert "Send error after request freed" in job.stderr or "Segmentation" in job.stderr, job.stderr
