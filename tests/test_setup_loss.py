"""Tier 1: dpmpi-run launches a job again after a death in its setup that the job could not repair,
before any rank committed a snapshot (dpmpi.setup_loss; pure, and dpmpi-run with a fake mpirun)."""
import json
import os
import subprocess
import sys

from dpmpi import setup_loss

PROC_FAILED = "uncaught ProcFailedError: a peer process failed in Sendrecv on a communicator of size 4"


def _failed(cause, status=1):
    return {"status": status, "cause": cause}


def _marks(first=None, repairs=()):
    return setup_loss.MarkWatch(committed={0} if first is not None else set(), first=first, repairs=set(repairs))


def test_a_death_in_the_setup_that_ended_the_launch_before_any_commit_names_its_victim():
    records = {0: _failed(PROC_FAILED), 2: _failed(PROC_FAILED), 3: {"status": 0}}  # (rank 1: killed)
    formed = {0, 1, 2, 3}
    none = _marks()
    assert setup_loss.setup_victim(4, records, formed, none, {1: 5.0}, 1) == 1
    assert setup_loss.setup_victim(4, records, formed, none, {}, 1) == 1  # (no commit: the death's time is moot)
    assert setup_loss.setup_victim(4, records, formed, _marks(9.0), {1: 5.0}, 1) == 1  # committed after the death
    # (a replacement's ReplayError, a spare's SparesDepletedError, Open MPI's abort, mpi4py's own error)
    for cause in ("uncaught ReplayError: comm.recv() ...", "uncaught SparesDepletedError: no spare can take",
                  "the MPI library aborted the process", "uncaught Exception: MPI_ERR_PROC_FAILED: Process Failure",
                  "Create_intercomm: stuck inside Open MPI's creation of an intercommunicator 30 s after ..."):
        assert setup_loss.setup_victim(4, {**records, 0: _failed(cause)}, formed, none, {}, 1) == 1, cause
    # exit code 0: the survivors shrank around the ranks that the death's error ended and completed a
    # job of fewer ranks (CI: halo_init.py, 2:Sendrecv@1:KILL, its two errors worded differently)
    assert setup_loss.setup_victim(4, records, formed, none, {1: 5.0}, 0) == 1


def test_no_launch_again_when_it_would_lose_work_or_the_program_failed_by_itself():
    records = {0: _failed(PROC_FAILED), 2: _failed(PROC_FAILED), 3: {"status": 0}}
    formed = {0, 1, 2, 3}
    none = _marks()
    # the job recovered: the survivors replaced or shrank around the killed rank, and no live rank failed
    assert setup_loss.setup_victim(4, {0: {"status": 0}, 2: {"status": 0}, 3: {"status": 0}}, formed, none,
                                   {1: 5.0}, 0) is None
    assert setup_loss.setup_victim(4, records, set(), none, {1: 5.0}, 1) is None  # not a dpmpi program
    assert setup_loss.setup_victim(4, records, formed, _marks(4.0), {1: 5.0}, 1) is None  # a snapshot existed
    assert setup_loss.setup_victim(4, records, formed, _marks(4.0), {}, 1) is None  # (and the death's time unknown)
    # the program repairs by itself (its own Respawn or Shrink): its end is its own (policy "abort", ...)
    assert setup_loss.setup_victim(4, records, formed, _marks(repairs=[2]), {1: 5.0}, 1) is None
    bug = {**records, 2: _failed("uncaught ValueError: bad config")}
    assert setup_loss.setup_victim(4, bug, formed, none, {1: 5.0}, 1) is None  # the program's own error
    exited = {**records, 2: _failed("sys.exit(3)", 3)}
    assert setup_loss.setup_victim(4, exited, formed, none, {1: 5.0}, 1) is None
    every = {r: _failed(PROC_FAILED) for r in range(4)}
    assert setup_loss.setup_victim(4, every, formed, none, {}, 1) is None  # nobody was killed: no fault


def test_the_commit_and_repair_lines_are_dpmpis_own():
    w = setup_loss.MarkWatch()
    assert w.note("some output of the program\n") is True and w.first is None
    assert w.note(f"{setup_loss.COMMITTED_TAG}2\n") is False and w.committed == {2} and w.first is not None
    first = w.first
    assert w.note(f"{setup_loss.COMMITTED_TAG}0\n") is False and w.committed == {0, 2} and w.first == first
    assert w.note(f"{setup_loss.COMMITTED_TAG}x\n") is True  # (not one of dpmpi's lines: the user's)
    assert w.note(f"{setup_loss.REPAIRS_TAG}3\n") is False and w.repairs == {3} and w.committed == {0, 2}


def _fake_mpirun(tmp_path, first_launch):
    """A fake mpirun: its first launch writes ``first_launch`` on stderr; a launch again (dpmpi-run
    sets DPMPI_REPLACEMENT=1 for it) writes every rank's formation and a status of 0."""
    first = tmp_path / "first.txt"
    first.write_text(first_launch)
    again = tmp_path / "again.txt"
    again.write_text("".join(f"[dpmpi-formed] {r}\n[dpmpi-status] {json.dumps({'rank': r, 'status': 0})}\n"
                             for r in range(4)))
    fake = tmp_path / "mpirun"
    fake.write_text(f'#!/bin/sh\nif [ -n "$DPMPI_REPLACEMENT" ]; then cat {again} >&2; else cat {first} >&2; fi\n')
    fake.chmod(0o755)
    return fake


def _launch(fake, **env):
    return subprocess.run([sys.executable, "-m", "dpmpi.run", "-n", "4", "--", "hostname"], capture_output=True,
                          text=True, cwd="/", env=dict(os.environ, DPMPI_MPIRUN=str(fake), **env), timeout=60)


def _setup_death(committed_before: bool, cause: str = PROC_FAILED) -> str:
    dead = "[vm:1] [prterun-vm-1@0,0] errmgr:dvm: proc [prterun-vm-1@1,1] aborted by signal\n"
    status = "".join(f"[dpmpi-status] {json.dumps({'rank': r, 'status': 1, 'cause': cause})}\n" for r in (0, 2, 3))
    formed = "".join(f"[dpmpi-init] {r}\n[dpmpi-formed] {r}\n" for r in range(4))
    commits = "".join(f"{setup_loss.COMMITTED_TAG}{r}\n" for r in range(4))
    return formed + (commits + dead if committed_before else dead + commits) + status


def test_dpmpi_run_launches_the_job_again_after_a_death_in_the_setup_before_any_commit(tmp_path):
    proc = _launch(_fake_mpirun(tmp_path, _setup_death(committed_before=False)))
    assert proc.returncode == 0, proc.stderr
    assert ("dpmpi-run: rank 1 died in the program's setup, before any rank had committed a snapshot, and the job "
            "could not repair it there") in proc.stderr and "launches the job again, 1 of 2" in proc.stderr
    assert "[dpmpi-committed]" not in proc.stderr and "[dpmpi-formed]" not in proc.stderr  # (dpmpi's own lines)
    off = _launch(_fake_mpirun(tmp_path, _setup_death(committed_before=False)), DPMPI_START_RETRIES="0")
    assert off.returncode == 1 and "launches the job again" not in off.stderr, off.stderr


def test_dpmpi_run_launches_the_job_again_when_the_survivors_shrank_around_the_deaths_errors(tmp_path):
    """Rank 0 completed a job of fewer ranks after ranks 2 and 3 raised the death's error (its
    repair counted 1, 2 and 3): not a recovery (exit_code says 1 now; it said 0 when the two
    errors named different failed ranks, as in CI), and the job asked for four."""
    errors = {2: PROC_FAILED + " (failed ranks known here: [1])", 3: PROC_FAILED + " (failed ranks known here: [1, 2])"}
    first = _setup_death(False).split("[dpmpi-status]")[0] + "".join(
        f"[dpmpi-status] {json.dumps(rec)}\n" for rec in (
            {"rank": 0, "status": 0, "recovered": [1, 2, 3]}, *({"rank": r, "status": 1, "cause": c}
                                                               for r, c in errors.items())))
    off = _launch(_fake_mpirun(tmp_path, first), DPMPI_START_RETRIES="0")
    assert off.returncode == 1 and "the same uncaught error ended 2 ranks" in off.stderr, off.stderr
    proc = _launch(_fake_mpirun(tmp_path, first))
    assert proc.returncode == 0 and "launches the job again, 1 of 2" in proc.stderr, proc.stderr


def test_dpmpi_run_does_not_launch_again_after_a_commit_a_program_error_or_the_programs_own_repair(tmp_path):
    own = _setup_death(False, "uncaught SparesDepletedError: no spare can take").replace(
        "[dpmpi-status]", f"{setup_loss.REPAIRS_TAG}0\n[dpmpi-status]", 1)
    for first_launch in (_setup_death(committed_before=True), _setup_death(False, "uncaught KeyError: 'alpha'"), own):
        proc = _launch(_fake_mpirun(tmp_path, first_launch))
        assert proc.returncode == 1, proc.stderr
        assert "launches the job again" not in proc.stderr and "rank 1 died (no status" in proc.stderr, proc.stderr


def test_the_same_rank_dying_in_the_setup_of_two_launches_is_the_programs_own_crash(tmp_path):
    fake = tmp_path / "mpirun"
    said = tmp_path / "first.txt"
    said.write_text(_setup_death(committed_before=False))
    fake.write_text(f"#!/bin/sh\ncat {said} >&2\n")  # (every launch: rank 1 dies in the setup)
    fake.chmod(0o755)
    proc = _launch(fake)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.count("launches the job again") == 1, proc.stderr
