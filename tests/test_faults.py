"""Tier 3: fault tests. Each test is its own dpmpi-run job with a hard timeout, judged from the
ranks' JSON-lines output and the job's exit code."""
import json
import os
import sys
from pathlib import Path

import pytest

N = 4
FAILURE_ERRORS = {"ProcFailedError", "RevokedError"}


def check_recovered(job, victims, n=N):
    assert job.returncode == 0, f"job exit code {job.returncode}\n{job.stdout}\n{job.stderr}"
    survivors = [r for r in range(n) if r not in victims]
    caught, repaired, finished = job.by_rank("caught"), job.by_rank("repaired"), job.by_rank("finished")
    # a victim may catch the first failure too, before its own fault fires in the repair (two
    # killed at their 100th Allreduce: the revoke can end the other's 99th)
    assert set(survivors) <= set(caught) <= set(survivors) | set(victims), job.stdout + job.stderr
    for r in survivors:
        assert caught[r]["error"] in FAILURE_ERRORS
        assert repaired[r]["size"] == len(survivors)
        assert repaired[r]["agreed"] == 1
        assert repaired[r]["sum"] == float(sum(s + 1 for s in survivors))
    assert sorted(finished) == survivors
    assert not job.by_rank("no-failure")
    fired = {f["rank"] for f in job.faults()}
    assert fired == set(victims)


def check_as_failure_free(dpmpi_run, program, key, faults, *args, env=None):
    """One failure-free job of ``program`` (4 ranks + 1 spare) and one with ``faults``: both exit
    0, each rank's final ``key`` is the same in both, every rank recovered once; returns the
    failure-free job."""
    clean = dpmpi_run(5, program, launcher_args=["--spares", "1"])
    job = dpmpi_run(5, program, *args, launcher_args=["--spares", "1"], faults=faults, env=env)
    assert clean.returncode == 0 and job.returncode == 0, job.stdout + job.stderr
    expected = {r: e[key] for r, e in clean.by_rank("final").items()}
    got = job.by_rank("final")
    assert {r: e[key] for r, e in got.items()} == expected and len(expected) == 4, job.stdout
    assert all(e["recoveries"] == 1 for e in got.values()), job.stdout
    return clean


# item 7: every way a rank can die, victim rank 2 in an Allreduce loop
@pytest.mark.parametrize("kind", ["KILL", "TERM", "SEGV", pytest.param("ABORT", marks=pytest.mark.long),  # (long:
                                  pytest.param("EXIT", marks=pytest.mark.long), "SYSEXIT", "EXCEPTION"])  # the budget)
def test_every_kind_of_death_is_noticed(dpmpi_run, kind):
    job = dpmpi_run(N, "survive.py", "--op", "allreduce", faults=f"2:Allreduce@200:{kind}")
    check_recovered(job, [2])


def test_exit_status_of_failed_rank_is_reported(dpmpi_run):
    job = dpmpi_run(N, "survive.py", faults="2:Allreduce@50:EXIT")
    check_recovered(job, [2])
    assert "rank 2 failed (status 3, os._exit(3))" in job.stderr


def test_hang_is_ended_by_the_stall_watchdog(dpmpi_run):
    job = dpmpi_run(N, "survive.py", faults="2:Allreduce@200:HANG", env={"DPMPI_STALL_TIMEOUT": "1"})
    check_recovered(job, [2])
    assert "made no progress" in job.stderr
    # where the rank was stuck, from its main thread (faulthandler's, on the watchdog's signal)
    stack = job.stderr.split("where its main thread was: the stack below", 1)[-1]
    assert "Stack (most recent call first)" in stack and 'survive.py", line' in stack, job.stderr


@pytest.mark.parametrize("where", ["start", pytest.param("end", marks=pytest.mark.long)])  # (make test's budget)
def test_the_stall_watchdog_leaves_a_slow_start_and_an_uneven_end_alone(dpmpi_run, where):
    """DPMPI_STALL_TIMEOUT=1 ended a rank that made no dpmpi call within 1 s of importing dpmpi
    (every rank, at each of dpmpi-run's relaunches: exit code 124; an import of a large package,
    or MPI_Init at scale, takes that long) and every rank that ended more than 1 s before the last
    one, while it waited for it at its end (exit code 124 for a job that completed). The watchdog
    is armed from the first dpmpi call to the start of the end now."""
    job = dpmpi_run(4, "slow_ends.py", where, env={"DPMPI_STALL_TIMEOUT": "1"}, timeout=60)
    assert job.returncode == 0, job.stdout + job.stderr
    done = sorted(line for line in job.stdout.splitlines() if line.startswith("done"))
    assert done == [f"done {r} 6" for r in range(4)], job.stdout + job.stderr
    assert "made no progress" not in job.stderr and "launching the job again" not in job.stderr, job.stderr


def test_the_stall_watchdog_counts_dpmpis_own_snapshot_work_as_a_call_in_progress(dpmpi_run):
    """384 MiB per rank allocated lazily by the program (quick), then snapshotted by dpmpi: its
    memory's allocation and pre-faulting and the first snapshot's copy and replication take more
    than DPMPI_STALL_TIMEOUT=1 s here, with no MPI call of the program's. Before the fifty-first
    session the watchdog ended every healthy rank as stalled (4 of 4 runs; 2 steps: this test
    took 19 s in make test with 256 MiB and 5 steps); dpmpi's own entry points
    (``interrupts.uninterrupted``) now count as calls in progress."""
    job = dpmpi_run(5, "big_first_snapshot.py", 384, 2, launcher_args=["--spares", "1"],
                    env={"DPMPI_STALL_TIMEOUT": "1"}, timeout=60)
    assert job.returncode == 0 and "made no progress" not in job.stderr, job.stdout + job.stderr
    assert sorted(e["rank"] for e in job.events) == [0, 1, 2, 3] and {e["w0"] for e in job.events} == {4.0}, \
        job.stdout + job.stderr


@pytest.mark.parametrize("how", [pytest.param("kill", marks=pytest.mark.long), "hang"])  # (make test's budget)
def test_a_dead_ranks_children_do_not_keep_the_job_from_ending(dpmpi_run, how):
    """A rank's child process (a pool worker) outlived the rank, SIGKILLed or ended by the stall
    watchdog; the job completed, every result right, and then never ended (until its time limit):
    the child held the output of the launcher's daemon. Now each repair ends the dead process's
    process group on its node (dpmpi/resilient/orphans.py)."""
    env = {"DPMPI_STALL_TIMEOUT": "1"} if how == "hang" else {}
    job = dpmpi_run(5, "orphan_child.py", how, launcher_args=["--spares", "1"], env=env, timeout=40)
    assert job.returncode == 0, job.stdout + job.stderr
    done = job.by_rank("done")
    assert sorted(done) == [0, 1, 2, 3] and all(d["x"] == 80.0 for d in done.values()), job.stdout + job.stderr
    child = [json.loads(line)["pid"] for line in job.stdout.splitlines() if '"child"' in line]
    assert len(child) == 1, job.stdout
    try:
        with open(f"/proc/{child[0]}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        state = "gone"
    assert state in ("gone", "Z"), (child, state)  # (a zombie until PID 1 reaps it)
    if how == "hang":  # (the stalled rank's last words: where its program was)
        assert 'orphan_child.py", line 33 in step' in job.stderr, job.stderr


def test_a_rank_stuck_in_its_fatal_signal_handler_is_ended_and_replaced(dpmpi_run):
    """Seen in chaos: a Jacobi rank sent SIGSEGV printed the first lines of Open MPI's handler and
    no frame, and stayed inside it (its backtrace() met a lock), alive to ULFM, its heartbeat
    beating: the job hung until its limit. Here rank 1's handler sleeps for ever; dpmpi's
    deadline in front of it (cext/dpmpi_fatal.c) ends the process by SIGALRM after
    DPMPI_FATAL_DEADLINE (1 s here), and the spare takes its place. Without it the job hangs
    (its time limit ends it)."""
    job = dpmpi_run(5, "stuck_in_handler.py", launcher_args=["--spares", "1"], env={"DPMPI_FATAL_DEADLINE": "1"},
                    timeout=40)
    assert job.returncode == 0, job.stdout + job.stderr
    done = job.by_rank("done")
    want = [sum(6 + 4 * k for k in range(12))] * 4  # (the Allreduce of r + k over 4 ranks, 12 steps)
    assert sorted(done) == [0, 1, 2, 3] and all(d["x"] == want for d in done.values()), job.stdout + job.stderr
    assert done[1]["role"] == "RECOVERED", done
    assert "rank 1 died" in job.stderr and "Traceback" not in job.stderr, job.stderr


def test_victim_is_rank_0(dpmpi_run):
    check_recovered(dpmpi_run(N, "survive.py", faults="0:Allreduce@100:KILL"), [0])


def test_two_ranks_die_together(dpmpi_run):
    check_recovered(dpmpi_run(N, "survive.py", faults="1:Allreduce@100:KILL,2:Allreduce@100:KILL"), [1, 2])


def test_a_death_inside_the_repair_shrinks_the_shrunk_communicator_again(dpmpi_run):
    # rank 1 catches rank 2's failure at its 100th Allreduce and dies at its 101st, the first on
    # the shrunk communicator (CI met it by chance with both killed at their 100th: rank 1's 99th
    # was ended by the revoke); survive.py's loop shrinks again
    job = dpmpi_run(N, "survive.py", faults="2:Allreduce@100:KILL,1:Allreduce@101:KILL")
    check_recovered(job, [1, 2])
    assert sorted(job.by_rank("failed-again")) == [0, 3], job.stdout + job.stderr


def test_survivors_in_barrier(dpmpi_run):
    check_recovered(dpmpi_run(N, "survive.py", "--op", "barrier", faults="2:Barrier@100:KILL"), [2])


def test_survivors_in_a_pickled_reduction(dpmpi_run):
    # mpi4py's fast reduction of objects runs on a private duplicate that a Revoke does not reach;
    # with it, a rank waiting there for a peer gone into repair hung (victim 3 here: 1 of 1 hung)
    check_recovered(dpmpi_run(N, "survive.py", "--op", "allreduce-obj", faults="3:allreduce@100:KILL"), [3])


@pytest.mark.parametrize("victim", [1, 2])
def test_survivors_in_a_halo_exchange_at_the_chain_ends(dpmpi_run, victim):
    # Open MPI 5.0.x MPI_Sendrecv with source=PROC_NULL segfaults when its send fails with
    # ERR_REVOKED; dpmpi's Sendrecv is Irecv + Isend + Waitall
    job = dpmpi_run(N, "survive.py", "--op", "halo", faults=f"{victim}:Sendrecv@{2 * 50 + 1}:KILL")
    assert "Segmentation fault" not in job.stderr
    check_recovered(job, [victim])


def test_survivors_in_recv_from_victim(dpmpi_run):
    # the victim sends 3 messages an iteration; it dies before the first send of iteration 50
    job = dpmpi_run(N, "survive.py", "--op", "recv-victim", faults=f"2:Send@{49 * 3 + 1}:KILL")
    check_recovered(job, [2])


def test_survivors_in_recv_any_source(dpmpi_run):
    check_recovered(dpmpi_run(N, "survive.py", "--op", "recv-any", faults="2:Send@100:KILL"), [2])


def test_time_fault_on_a_plain_mpi4py_program(dpmpi_run):
    """A program that never imports dpmpi is covered when launched with dpmpi-run."""
    job = dpmpi_run(N, "plain_mpi4py.py", faults="2:time@0.5:EXCEPTION")
    shrunk = job.by_rank("shrunk")
    assert sorted(shrunk) == [0, 1, 3]
    assert all(e["size"] == 3 for e in shrunk.values())
    assert "InjectedFault" in job.stderr
    # mpi4py's own Shrink is invisible to dpmpi-run: the failure counts as not repaired
    assert job.returncode == 1
    assert "rank 2 failed (status 1, uncaught InjectedFault" in job.stderr


def test_a_rank_failing_alone_fails_the_job(dpmpi_run):
    """No peer failure at all: one rank exits with an error after the others completed."""
    job = dpmpi_run(N, "survive.py", "--iters", "100", faults="1:finish@1:SYSEXIT")
    assert job.returncode == 3, job.stderr
    assert sorted(job.by_rank("finished")) == [0, 2, 3]


def test_unrecovered_failure_fails_the_job(dpmpi_run):
    job = dpmpi_run(N, "survive.py", "--no-repair", faults="2:Allreduce@100:KILL")
    assert job.returncode != 0
    assert sorted(job.by_rank("caught")) == [0, 1, 3]
    assert not job.by_rank("finished")


def test_fault_free_job_ends_cleanly(dpmpi_run):
    job = dpmpi_run(N, "survive.py", "--iters", "300")
    assert job.returncode == 0, job.stderr
    assert sorted(job.by_rank("no-failure")) == list(range(N))
    assert sorted(job.by_rank("finished")) == list(range(N))


def test_program_error_on_every_rank_gives_its_status(dpmpi_run):
    job = dpmpi_run(2, "survive.py", "--op", "nonsense")  # argparse exits 2 on every rank
    assert job.returncode == 2



def test_refuses_to_run_without_fault_tolerance(run_job, mpirun):
    code = "import dpmpi; dpmpi.COMM_WORLD.Barrier(); print('ran without FT')"
    job = run_job([*mpirun, "-n", "2", sys.executable, "-c", code], timeout=60)
    assert job.returncode != 0
    assert "ran without FT" not in job.stdout
    assert "FaultToleranceUnavailableError" in job.stderr
    assert "--with-ft ulfm" in job.stderr


def test_plain_mpirun_with_ft_keeps_working(run_job, mpirun, program):
    """Users who launch with mpirun themselves (no dpmpi-run) get the same recovery."""
    cmd = [*mpirun, "--with-ft", "ulfm", "-n", "4", sys.executable, program("survive.py")]
    job = run_job(cmd, env={"DPMPI_FAULTS": "2:Allreduce@100:EXCEPTION"})
    check_recovered(job, [2])


# the hung-rank detector (DPMPI_HEARTBEAT_TIMEOUT): a stopped rank is killed, then recovered from
HB_LINE = "sent no heartbeat for"


@pytest.mark.long  # (make test's budget: test_hotswap's stopped rank covers the heartbeat's kill and a recovery)
def test_a_stopped_rank_is_killed_by_the_heartbeat_and_recovered(dpmpi_run):
    job = dpmpi_run(N, "survive.py", faults="2:Allreduce@200:STOP", env={"DPMPI_HEARTBEAT_TIMEOUT": "1"}, timeout=60)
    check_recovered(job, [2])
    lines = [line for line in job.stderr.splitlines() if HB_LINE in line]
    assert len(lines) == 1 and lines[0].startswith("[dpmpi] rank 2 (pid "), job.stderr
    assert "killed (SIGKILL) so the job can recover" in lines[0]


@pytest.mark.parametrize("how", [pytest.param(h, marks=pytest.mark.long) for h in ("sleep", "spin")])  # (make test's budget)
def test_a_rank_that_pauses_3_timeouts_is_not_killed(dpmpi_run, how):
    # time.sleep(3), or a pure-Python loop holding the GIL for 3 s, between two collectives, T = 1 s
    job = dpmpi_run(N, "survive.py", "--iters", "100", "--pause", f"1:50:3:{how}",
                    env={"DPMPI_HEARTBEAT_TIMEOUT": "1"}, timeout=60)
    assert job.returncode == 0, job.stderr
    assert HB_LINE not in job.stderr
    assert sorted(job.by_rank("no-failure")) == list(range(N))
    assert sorted(job.by_rank("finished")) == list(range(N))
    assert list(job.by_rank("resume")) == [1]


def test_an_abort_by_the_mpi_library_is_a_failure_the_others_repair_around(dpmpi_run):
    # Open MPI's fatal handler (e.g. "Send error after request freed", seen in a survivor when two
    # ranks died together) ends a process with _exit(code): the survivors hung in Shrink
    job = dpmpi_run(5, "mpi_abort.py", launcher_args=["--spares", "1"], timeout=60)
    assert job.returncode == 0, job.stderr
    assert sorted(line for line in job.stdout.splitlines() if line.startswith("done")) == [
        f"done {r} 300" for r in range(4)]
    assert "rank 1 failed (status 7, the MPI library aborted the process" in job.stderr


def test_a_revoke_during_large_transfers_aborts_no_healthy_rank(dpmpi_run):
    """Open MPI 5.0.11 ended every rank of this job ("Send error after request freed", 5 of 5
    runs) though none had died: a revoke ends in-flight requests that ob1 finishes later. dpmpi
    drops that one fatal-handler call; the ranks see the revoke, shrink and end normally."""
    job = dpmpi_run(3, "revoke_inflight.py", 5)
    assert job.returncode == 0, job.stderr
    done = job.by_rank("done")
    assert sorted(done) == [0, 1, 2] and all(e["size"] == 3 and e["error_class"] and e["iteration"] == 5 for e in done.values()), job.stdout
    assert "MPI_ERRORS_ARE_FATAL" not in job.stderr and not job.accounts(), job.stderr


def test_an_agree_that_a_repair_interrupts_raises_and_leaves_nothing_open(dpmpi_run):
    """Rank 1 starts a repair while the others wait for it in Agree on the active communicator
    (a collective that failed on one rank only, as across nodes). Before, both sides waited for
    each other until the repair deadline; now the others get RevokedError and join the repair,
    and the agreement they left is closed by it: Open MPI names none at MPI_Finalize."""
    job = dpmpi_run(4, "agree_in_repair.py", launcher_args=["--spares", "1"])
    assert job.returncode == 0, job.stderr
    done = job.by_rank("done")
    assert sorted(done) == [0, 1, 2] and all(e["agreed"] == 1 and e["size"] == 3 and e["repairs"] == 1
                                             for e in done.values()), job.stdout
    assert [done[r]["caught"] for r in (0, 1, 2)] == ["RevokedError", None, "RevokedError"], job.stdout
    assert job.stderr.strip() == "", job.stderr  # (no "ERA ERRONEOUS: Agreement ID ... never completed")


def test_a_death_seen_in_request_waitall_is_recovered(dpmpi_run):
    """dpmpi.Request.Waitall on a ring: the survivors' Waitall fails with MPI_ERR_IN_STATUS,
    which must become the dead peer's ProcFailedError (not a plain DpmpiError that ends the job)."""
    clean = dpmpi_run(5, "ring_waitall.py", launcher_args=["--spares", "1"])
    job = dpmpi_run(5, "ring_waitall.py", launcher_args=["--spares", "1"], faults="1:step@21:KILL")
    assert clean.returncode == 0 and job.returncode == 0, job.stderr
    expected = {r: (e["acc"], e["hops"]) for r, e in clean.by_rank("final").items()}
    got = job.by_rank("final")
    assert {r: (e["acc"], e["hops"]) for r, e in got.items()} == expected and len(expected) == 4
    assert all(e["recoveries"] == 1 for e in got.values())


def test_a_death_seen_in_mpi4pys_own_waitall_is_recovered(dpmpi_run):
    """The same ring completed by mpi4py's MPI.Request.Waitall (dpmpi requests are
    MPI.Requests): its MPI_ERR_IN_STATUS is mpi4py's exception, which the runtime must take for
    the dead peer's failure (with the watcher's interruption off, the failure always surfaces
    there). Before, mpi4py refused dpmpi requests with a TypeError."""
    clean = dpmpi_run(5, "ring_waitall.py", "mpi4py", launcher_args=["--spares", "1"])
    job = dpmpi_run(5, "ring_waitall.py", "mpi4py", "nointerrupt", launcher_args=["--spares", "1"],
                    faults="1:step@21:KILL")
    assert clean.returncode == 0 and job.returncode == 0, job.stderr
    expected = {r: (e["acc"], e["hops"]) for r, e in clean.by_rank("final").items()}
    got = job.by_rank("final")
    assert {r: (e["acc"], e["hops"]) for r, e in got.items()} == expected and len(expected) == 4
    assert all(e["recoveries"] == 1 for e in got.values()) and "Traceback" not in job.stderr


def test_persistent_requests_made_before_the_loop_work_after_a_repair(dpmpi_run):
    """A stranger's halo exchange made its persistent requests once, before the Runtime's loop:
    at the first recovery they still belonged to the revoked communicator, and the job ended
    (MPI_ERR_REQUEST / MPI_ERR_IN_STATUS). A repair now makes them again under the same objects
    (dpmpi/persistent.py), on the active communicator and on one derived from it."""
    n, steps = 4, 120
    job = dpmpi_run(n + 1, "persistent_ring.py", steps, launcher_args=["--spares", "1"], faults="2:step@50:KILL")
    assert job.returncode == 0, job.stdout + job.stderr
    x = [[0, 0] for _ in range(n)]  # the failure-free run, computed: a ring, and a pair in each parity
    for k in range(steps):
        out, hout = [x[r][0] + k + r for r in range(n)], [x[r][1] + k * r for r in range(n)]
        x = [[(x[r][0] + out[(r - 1) % n]) % 1000003, (x[r][1] + hout[r ^ 2]) % 1000003] for r in range(n)]
    got = job.by_rank("done")
    assert {r: e["x"] for r, e in got.items()} == dict(enumerate(x)), job.stdout
    assert all(e["recoveries"] == 1 for e in got.values()) and got[2]["role"] == "RECOVERED", job.stdout
    assert "Traceback" not in job.stderr and "Exception ignored" not in job.stderr, job.stderr


@pytest.mark.parametrize("faults", [pytest.param("", marks=pytest.mark.long), "1:step@80:KILL"],  # (make test's budget)
                         ids=["failure-free", "killed"])
def test_a_program_that_calls_mpi_finalize_itself_ends_cleanly(dpmpi_run, faults):
    """With an idle spare, a program's own MPI.Finalize() failed the job even without a failure
    (its fence waited for the spare, still waiting to be called in). Now it is dpmpi's end: every
    live process agrees, the spare leaves, MPI_Finalize runs, and nothing touches MPI after it."""
    import hashlib

    import numpy as np

    job = dpmpi_run(5, "explicit_finalize.py", launcher_args=["--spares", "1"], faults=faults, timeout=60)
    assert job.returncode == 0, job.stdout + job.stderr
    expected = {}
    for r in range(4):  # the failure-free state, computed with the same operations
        w = np.full(1000, float(r))
        for k in range(200):
            w[:] -= 0.001 * np.full_like(w, 4 * (k + 1.0))
        expected[r] = hashlib.sha256(w.tobytes()).hexdigest()
    assert {r: e["digest"] for r, e in job.by_rank("done").items()} == expected, job.stdout
    assert sorted(r for r, e in job.by_rank("finalized").items() if e["finalized"]) == [0, 1, 2, 3], job.stdout
    for bad in ("OPAL ERROR", "after MPI_FINALIZE", "did not return in time", "Traceback"):
        assert bad not in job.stderr, job.stderr


_ring_clean: dict = {}


@pytest.mark.parametrize("fault", [pytest.param("1:run-start@1:KILL", marks=pytest.mark.long),  # (make test's budget)
                                   "2:run-start@1+0.005:KILL"], ids=["before-its-copy", "while-taken"])
def test_a_rank_dying_while_the_first_snapshot_is_taken_is_recovered(dpmpi_run, fault):
    """A rank killed while the runtime takes its first snapshot: the ranks that got through it
    went on to step 0 while the others raised out of rt.run (a stranger's program, a rank
    SIGKILLed 0.7 s in: 1 of 20 runs hung). Now they agree, repair, and take epoch 0 again (or
    restore it where it survived); the cold spare builds its arrays as the dead rank did."""
    if not _ring_clean:
        clean = dpmpi_run(5, "ring_waitall.py", launcher_args=["--spares", "1"])
        assert clean.returncode == 0, clean.stderr
        _ring_clean.update({r: (e["acc"], e["hops"]) for r, e in clean.by_rank("final").items()})
    job = dpmpi_run(5, "ring_waitall.py", launcher_args=["--spares", "1"], faults=fault, timeout=60)
    assert job.returncode == 0, job.stderr
    got = job.by_rank("final")
    assert {r: (e["acc"], e["hops"]) for r, e in got.items()} == _ring_clean and len(got) == 4
    assert all(e["recoveries"] == 1 for e in got.values()) and "Traceback" not in job.stderr


# issue 10: a revoke that reaches a rank still inside the call creating the communicator made Open
# MPI 5.0.11 segfault it (ompi_comm_revoke_local); dpmpi warms up intercommunicators too
@pytest.mark.parametrize("how, who", [  # (the long ones: make test's budget; make test-long runs them)
    ("create", "all"), pytest.param("create", "0", marks=pytest.mark.long), pytest.param("dup", "all", marks=pytest.mark.long),
    ("split", "0"), pytest.param("create-group", "all", marks=pytest.mark.long), ("merge", "0")])
def test_revoking_a_fresh_intercommunicator_is_safe(dpmpi_run, how, who):
    job = dpmpi_run(N, "inter_revoke.py", how, who, timeout=60)
    assert job.returncode == 0, f"exit code {job.returncode}\n{job.stdout}\n{job.stderr}"
    lines = {e["rank"]: e for e in job.events}
    assert sorted(lines) == list(range(N)), job.stdout + job.stderr  # every rank ended cleanly
    for e in lines.values():
        assert e["revoked"] and e["barrier_error"] == 77  # MPI.ERR_REVOKED, on every rank
        assert e["inter"] == (how != "merge")
    assert "Segmentation" not in job.stderr and not job.accounts(), job.stderr


# Open MPI 5.0.11 segfaulted a process whose communicator, still being created, was revoked: by
# a rank that had already left the creating call, or by the failure notice of a rank that died
# inside it (every run: 3-4 of the other ranks); dpmpi's guard lets that revoke through with a
# stand-in for the collectives not yet selected (cext/dpmpi_revoke.c). A plain mpi4py program.
@pytest.mark.parametrize("mode", ["revoke", "die"])
def test_a_communicator_revoked_while_it_is_created_crashes_no_process(dpmpi_run, activate_faults, mode):
    env = {"LD_PRELOAD": str(activate_faults), "KILL_IN_ACTIVATE": "1:5"} if mode == "die" else {}
    job = dpmpi_run(N, "fresh_comms.py", mode, env=env, timeout=60)
    done = job.by_rank("done")
    for bad in ("Segmentation", "revoke_local", "OPAL ERROR"):
        assert bad not in job.stderr, job.stderr
    if mode == "revoke":  # every rank saw each of the 4 Dups revoked, and ended cleanly
        assert job.returncode == 0 and not job.accounts(), job.stderr
        assert sorted(done) == list(range(N)) and all(e["revoked"] == 4 and e["error"] is None
                                                      for e in done.values()), job.stdout
    else:  # rank 1 died inside the 5th creation (round 2's Dup); the others saw its failure there
        assert "[kill-in-activate] rank 1 at 5" in job.stderr, job.stderr
        assert job.returncode == 1 and job.accounts() == [
            "dpmpi-run: rank 1 died (no status: killed by a signal); no rank that completed repaired around it; "
            "exit code 1"], job.stderr
        assert sorted(done) == [0, 2, 3], job.stdout
        assert all(e["error"] == 75 and e["rounds"] == 2 for e in done.values()), job.stdout  # ERR_PROC_FAILED


def test_dpmpi_run_passes_on_no_nul_byte_of_open_mpis_help_messages(run_job):
    """Open MPI ends its help messages (here the topology module's "not tested for post-failure
    operation", printed under --with-ft ulfm for every Create_cart) with a NUL byte, which made
    text tools reading the job's stderr (grep, bash) choke."""
    code = "from mpi4py import MPI; MPI.COMM_WORLD.Create_cart([2], periods=[True])"
    job = run_job([str(Path(sys.executable).parent / "dpmpi-run"), "-n", "2", "--", sys.executable, "-c", code],
                  timeout=60)
    assert job.returncode == 0, job.stderr
    assert "not tested for post-failure" in job.stderr and "\0" not in job.stderr, repr(job.stderr[-300:])


@pytest.mark.parametrize("sig", ["SIGTERM", pytest.param("SIGINT", marks=pytest.mark.long)])  # (SIGINT: a 2 s grace)
def test_a_job_cancelled_through_dpmpi_run_ends_every_process(tmp_path, sig):
    """SIGTERM to dpmpi-run alone (a scheduler, `timeout`, `kill`) ended dpmpi-run and left mpirun
    and every rank running; a SIGINT to it alone was ignored and the job ran on. Now mpirun ends
    the job (after a SIGINT, once mpirun has had INT_GRACE s to do it by itself)."""
    import json
    import signal
    import subprocess

    cmd = [sys.executable, "-m", "dpmpi.run", "-n", "3", "--spares", "1", "--", sys.executable,
           str(Path(__file__).resolve().parent / "programs" / "run_forever.py")]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        pids = [json.loads(proc.stdout.readline())["pid"] for _ in range(2)]  # (the 2 active ranks)
        proc.send_signal(getattr(signal, sig))
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + getattr(signal, sig), err
    assert f"dpmpi-run: the job was cancelled ({sig} to dpmpi-run)" in err, err

    def running(pid):
        try:
            return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
        except OSError:
            return False
    assert not [p for p in pids if running(p)], (pids, err)


def test_a_survivor_stuck_in_a_call_the_failure_does_not_reach_ends_itself_and_the_job_recovers(dpmpi_run):
    """A survivor whose main thread stayed inside a call that a peer's death does not reach (found:
    the allgather of Open MPI's one-sided component inside MPI_Win_allocate, over its private copy
    of the communicator) never joined the repair: the others reached their repair deadline and
    ended one by one while it lived on (the job shrank to it), or the job hung. Now a notice that
    the main thread has not taken after 0.6 of DPMPI_REPAIR_TIMEOUT ends that process as a
    failure, and the others' repair completes without it: here a Recv on a private Dup that
    nobody sends on, world rank 3 killed meanwhile; without this the job hung until its timeout."""
    args = dict(launcher_args=["--spares", "2"], env={"DPMPI_REPAIR_TIMEOUT": "6"}, timeout=60)
    ref = dpmpi_run(6, "stuck_call.py", "ref", **args)
    job = dpmpi_run(6, "stuck_call.py", "stuck", faults="3:stuck@1:KILL", **args)
    assert ref.returncode == 0 and job.returncode == 0, (ref.stderr, job.stderr)
    digests = [e["digest"] for j in (ref, job) for e in j.events if "digest" in e]
    assert len(digests) == 2 and digests[0] == digests[1], digests
    assert "rank 1 failed (status 1, stuck in a call for 3.6 s after a peer's death was noticed" in job.stderr, job.stderr
    assert "rank 3 died" in job.stderr and "recovered and completed; exit code 0" in job.stderr, job.stderr


def test_a_crash_inside_mpi_finalize_after_an_agreed_end_with_a_failure_known_ends_the_process_cleanly(dpmpi_run):
    """Survivors of programs that made one-sided windows in every step crashed inside MPI_Finalize
    at their normal exit after two ranks had been killed (about 1 job in 10: glibc's "free():
    invalid pointer" in Open MPI's cleanup, the heap most likely corrupted by its error path for a
    window whose creation a death cut short), after every live process had agreed to end. Now a fatal
    signal there ends the process with exit status 0 and one line saying so. Made deterministic
    here: rank 1 puts an attribute on COMM_SELF whose delete callback is abort(). A failure-free
    job's crash there keeps Open MPI's report (no failure explains it), and since the fifty-second
    session dpmpi-run's account and exit code say so (before: exit code 0 and no word)."""
    note = "dpmpi: MPI_Finalize crashed (signal 6) after every live process had agreed to end, a failure known"
    ref = dpmpi_run(5, "finalize_crash.py", launcher_args=["--spares", "1"], timeout=60)
    assert ref.returncode == 134 and {"event": "armed", "rank": 1} in ref.events, (ref.stdout, ref.stderr)
    assert "Signal: Aborted (6)" in ref.stderr and note not in ref.stderr, ref.stderr
    assert "dpmpi-run: MPI_Finalize crashed in rank 1 (signal 6), with no failure in the job" in ref.stderr, ref.stderr
    job = dpmpi_run(5, "finalize_crash.py", launcher_args=["--spares", "1"], faults="2:step@5:KILL", timeout=60)
    assert job.returncode == 0, job.stderr
    digests = [[e["digest"], e["recoveries"]] for j in (ref, job) for e in j.events if "digest" in e]
    assert digests[0] == [digests[1][0], 0] and digests[1][1] == 1, digests
    assert note in job.stderr and "Process received signal" not in job.stderr, job.stderr


@pytest.mark.parametrize("handler", [True, False])
def test_a_signal_that_mpirun_forwards_reaches_every_rank_through_dpmpi_run(tmp_path, handler):
    """SIGUSR1 (a batch system's warning before a time limit or a preemption) sent to dpmpi-run
    ended dpmpi-run alone: mpirun and the ranks ran on, orphaned, and no rank got it. Now
    dpmpi-run passes it on to mpirun, which forwards it to every rank as it does for its own:
    a program with a handler stops at the same step everywhere and the job exits 0; one without
    ends by the signal, and the account says that dpmpi-run passed it on."""
    import json
    import signal
    import subprocess

    cmd = [sys.executable, "-m", "dpmpi.run", "-n", "3", "--spares", "1", "--", sys.executable,
           str(Path(__file__).resolve().parent / "programs" / "usr1_stop.py"), "handler" if handler else "none"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pids: list[int] = []
    try:
        pids += [json.loads(proc.stdout.readline())["pid"] for _ in range(2)]  # (the 2 active ranks)
        proc.send_signal(signal.SIGUSR1)
        out, err = proc.communicate(timeout=30)
        left = [p for p in pids if Path(f"/proc/{p}").exists()]
    finally:
        if proc.poll() is None:
            proc.kill()
        for p in pids:  # (ranks that a dpmpi-run ended by the signal left running; not a reused pid)
            try:
                if b"usr1_stop.py" in Path(f"/proc/{p}/cmdline").read_bytes():
                    os.kill(p, signal.SIGKILL)
            except OSError:
                pass
    ends = [json.loads(line) for line in out.splitlines() if '"stopped"' in line]
    if handler:
        assert proc.returncode == 0, err
        assert sorted(e["rank"] for e in ends) == [0, 1], out
        assert len({e["step"] for e in ends}) == 1 and ends[0]["step"] is not None, out
        assert all(e["got"] == 1 for e in ends), out
    else:
        assert proc.returncode == 1 and not ends, (out, err)
        assert "(dpmpi-run passed SIGUSR1 on to every rank); exit code 1" in err, err
    assert not left, (left, err)


@pytest.mark.parametrize("n", [1, 2])
def test_a_dpmpi_program_spawns_and_merges_with_a_plain_mpi4py_child(dpmpi_run, n):
    """Spawn finds room at N <= cores, and dpmpi adds no warm-up collective to a communicator
    that reaches another job (the plain child would not make it: the Merge hung)."""
    job = dpmpi_run(n, "spawn_plain.py", timeout=60)
    assert job.returncode == 0, f"exit code {job.returncode}\n{job.stdout}\n{job.stderr}"
    sides = sorted((e["side"], e["rank"]) for e in job.events)
    assert sides == [("child", n)] + [("parent", r) for r in range(n)], job.stdout + job.stderr
    assert all(e["size"] == n + 1 and e["total"] == n * (n + 1) // 2 for e in job.events)
    assert {e["inter"] for e in job.events if e["side"] == "parent"} == {"Comm"}  # a dpmpi.Comm


def _late_fin_job(dpmpi_run, tmp_path, late_filter, mode="fin"):
    pipe = tmp_path / "go"
    os.mkfifo(pipe)
    job = dpmpi_run(2, "late_fin.py", pipe, mode, env={"DPMPI_LATE_FILTER": late_filter}, timeout=60)
    done = job.by_rank("done")
    return job, done.get(0)


def test_a_dead_peers_late_completion_message_is_dropped(dpmpi_run, tmp_path):
    """Open MPI 5.0.11 cancels a large send when its peer fails and returns the send's fragment;
    a completion message (FIN) the peer sent before it died, handled afterwards, returned it a
    second time. dpmpi's filter drops that FIN: the sender goes on and ends cleanly."""
    job, rec = _late_fin_job(dpmpi_run, tmp_path, "1")
    assert rec is not None, job.stdout + job.stderr
    assert rec["filter"] == 0 and rec["outcome"] == "MPI_ERR_PROC_FAILED", rec
    assert rec["by"] == "preload", rec  # installed at MPI_Init, before the program's first dpmpi call
    assert rec["seen"] == [1, 0, 0, 0] and rec["dropped"] == [1, 0, 0, 0], rec
    for bad in ("Segmentation", "Send error after request freed", "OPAL ERROR", "Traceback"):
        assert bad not in job.stderr, job.stderr
    assert "rank 0" not in job.stderr.split("dpmpi-run:")[-1], job.stderr  # rank 0 ended cleanly


def test_without_the_filter_open_mpi_mishandles_that_message(dpmpi_run, tmp_path):
    """The same program with DPMPI_LATE_FILTER=0 shows the defect the filter exists for: Open MPI
    handles the FIN (returns the fragment again, then ends in error or crashes). If a later Open MPI
    fixes it, this test fails and the filter can go."""
    job, rec = _late_fin_job(dpmpi_run, tmp_path, "0")
    assert rec is not None and rec["filter"] == 1 and rec["dropped"] == [0, 0, 0, 0], job.stdout + job.stderr
    assert "Send error after request freed" in job.stderr or "Segmentation" in job.stderr, job.stderr



def test_a_dead_peers_late_ack_is_dropped(dpmpi_run, tmp_path):
    """The same with a non-contiguous send (rendezvous): the late message is the ACK that asks
    for the rest of a send Open MPI already cancelled. The filter drops it (without the filter no
    failure was seen in this variant: ob1 then sends the rest to the dead peer)."""
    job, rec = _late_fin_job(dpmpi_run, tmp_path, "1", "ack")
    assert rec is not None, job.stdout + job.stderr
    assert rec["outcome"] == "MPI_ERR_PROC_FAILED" and rec["dropped"] == [0, 1, 0, 0], rec
    for bad in ("Segmentation", "Send error after request freed", "OPAL ERROR", "Traceback"):
        assert bad not in job.stderr, job.stderr


@pytest.mark.parametrize("how", ["Recv", pytest.param("Irecv", marks=pytest.mark.long),  # (make test's budget)
                                 pytest.param("pickled", marks=pytest.mark.long)])
def test_a_matched_receive_whose_sender_died_raises_proc_failed_error(dpmpi_run, how):
    """``comm.Mprobe`` returns a dpmpi.Message: its receive of a message whose sender died
    after the probe matched it raises ProcFailedError, as every receive of dpmpi's does (it
    raised mpi4py's MPI.Exception: a program written to the README's primitives did not catch
    it)."""
    job = dpmpi_run(2, "mrecv_dead.py", *(["irecv"] if how == "Irecv" else ["pickled"] if how == "pickled" else []))
    done = job.by_rank("done")
    assert set(done) == {1}, job.stdout + job.stderr
    assert done[1]["message"] == "dpmpi.message.Message"
    assert done[1]["received"] == "ProcFailedError", job.stdout + job.stderr


def test_sendrecv_replace_at_a_chain_end_whose_send_is_revoked_raises_instead_of_crashing(dpmpi_run):
    """Open MPI 5.0.11's Sendrecv_replace with source MPI_PROC_NULL is its Sendrecv, which cancels
    an uninitialised request when the send fails with ERR_REVOKED: this program segfaulted on
    the old code (every run). dpmpi's is an Irecv plus an Isend of a copy, waited for together."""
    job = dpmpi_run(2, "sendrecv_replace_edge.py")
    assert "Segmentation fault" not in job.stderr, job.stderr
    done = job.by_rank("done")
    assert set(done) == {0, 1}, job.stdout + job.stderr
    assert done[1]["raised"] == "RevokedError", done  # (its own revoke: the send fails at once)
    # rank 0's send may start before the revoke reaches it, and Open MPI then ends it without an
    # error when rank 1 refuses the message (ob1's revoke handling): 1 run in 3 here
    assert done[0]["raised"] in ("RevokedError", "completed"), done


def test_an_isendrecv_whose_source_died_raises_instead_of_waiting_for_ever(dpmpi_run):
    """Open MPI 5.0.11's Isendrecv request never fails when its peer dies: the survivors' waits
    never returned (this program under ``comm.mpi``: the job's timeout, 2 of 2 runs; 2 of 8 killed
    runs of bench/strangers/isendrecv_step.py hung). dpmpi's Isendrecv and Isendrecv_replace
    return their receive's request: dpmpi's ``Wait`` raises ProcFailedError, mpi4py's own
    ``MPI.Request.Waitall`` its MPI error."""
    job = dpmpi_run(3, "isendrecv_dead.py")
    done = job.by_rank("done")
    assert set(done) == {0, 2}, job.stdout + job.stderr
    assert done[0]["wait"] == "ProcFailedError", job.stdout + job.stderr
    assert done[2]["wait"] == "Exception" and done[2]["proc_failed"], done[2]


def test_a_message_matched_by_an_interrupted_step_does_not_hold_its_sender(dpmpi_run):
    """Rank 0 matched rank 1's message with Mprobe, then its step failed (rank 2's death) before
    it received it: rank 1 waited for ever in the Wait of its send (Open MPI does not fail a send
    whose message a peer matched; a revoke does not reach it), while the others waited for it in
    the repair's Shrink until the repair deadline (then the job split). The repair now receives
    an unreceived message of a revoked communicator into scratch memory: the job recovers and
    ends as the failure-free run."""
    check_as_failure_free(dpmpi_run, "mprobe_held.py", "sum", "2:matched@1:KILL", 4, env={"DPMPI_REPAIR_TIMEOUT": "20"})


def test_an_idup_in_every_step_with_a_split_and_an_iallreduce_before_its_wait_is_recovered(dpmpi_run):
    """A stranger's Idup per step with a Split and an Iallreduce of the same communicator before
    the Idup's Wait: failure-free it hung (the Split) or crossed the Iallreduce with the Idup
    (MPI_ERR_TRUNCATE) under dpmpi; now the Idup is complete first (a Dup made at once, on
    dpmpi.init's communicator), and a rank killed in the step is recovered bit for bit."""
    check_as_failure_free(dpmpi_run, "idup_split.py", "x", "2:step@25:KILL")


@pytest.mark.long  # (make test's budget: fiftieth session)
def test_a_library_communicator_made_with_idup_before_the_loop_is_rebuilt(dpmpi_run):
    """An Idup of dpmpi.init's communicator kept across the loop: the job hung at its first
    failure (a true Idup is not rebuilt; the replacement's setup made its own with nobody). It is
    made as a Dup that repairs rebuild now: rank 2 killed mid-run, the failure-free result."""
    clean = check_as_failure_free(dpmpi_run, "idup_lib.py", "x", "2:step@30:KILL")
    assert "Idup" not in clean.stderr, clean.stderr  # (no "not rebuilt" warning)
