"""dpmpi.Snapshot across ranks with real failures: each test is a dpmpi-run job (4 active ranks
plus spares) of tests/programs/snap.py, judged from its JSON lines: every restored array must
equal, bit for bit, what that logical rank held at the restored epoch."""
import json
import os

import pytest

EPOCHS = 8


def finished(job, n=4):
    assert job.returncode == 0, f"exit code {job.returncode}\n{job.stdout}\n{job.stderr}"
    done = job.by_rank("done")
    assert sorted(done) == list(range(n)), job.stdout + job.stderr
    for e in done.values():
        assert e["epoch"] == EPOCHS and e["digest"] == e["want"], e
    return done


def restored(job):
    events = [e for e in job.events if e["event"] == "restored"]
    assert events and all(e["ok"] for e in events), job.stdout
    return events


def test_replacement_gets_the_failed_ranks_epoch_bit_for_bit(dpmpi_run):
    job = dpmpi_run(5, "snap.py", "--sync", launcher_args=["--spares", "1"], faults="2:committed@5:KILL")
    done = finished(job)
    assert (done[2]["wid"], done[2]["role"]) == (4, "RECOVERED")
    # the spare imported dpmpi.Runtime's modules before it waited (~20 ms less on the path to its
    # first restore); an active rank of this program, which never uses Runtime, did not
    assert {e["wid"]: e["preloaded"] for e in job.events if e["event"] == "active"} == \
        {0: False, 1: False, 2: False, 3: False, 4: True}
    events = restored(job)
    assert sorted(e["wid"] for e in events) == [0, 1, 3, 4]
    assert all(e["epoch"] == 5 for e in events)
    assert [e["wid"] for e in events if e["detail"]["received"]] == [4]  # only the replacement got a copy
    # restore() without swap: the arrays may be written at once, so the copy goes through its own slot
    assert [e["wid"] for e in events if e["detail"]["direct"]] == []


def test_a_replacement_restored_into_its_arrays_gets_its_own_copy_too(dpmpi_run):
    """With restore(swap=True) the replacement receives its copy straight into its arrays and
    copies them back into its own slot before it modifies them: when that holder (its only buddy)
    dies right after its restore, before another commit, the replacement restores from its own
    slot and nothing is lost. (Before, the holder sent that slot's bytes in the re-replication: a
    holder that died first lost the epoch, SnapshotLostError, 1 run in ~150 of
    test_hotswap's derived_per_step.py under load.)"""
    job = dpmpi_run(6, "snap.py", "--sync", "--swap", launcher_args=["--spares", "2"],
                    faults="2:committed@5:KILL,3:restored@1:KILL")
    finished(job)
    events = restored(job)
    first, second = ([e for e in events if e["detail"]["total_ms"] and e["repair"] == k] for k in (1, 2))
    assert [e["wid"] for e in first if e["detail"]["direct"]] == [4]
    assert {e["epoch"] for e in second} == {5}
    assert [e["wid"] for e in second if e["detail"]["received"]] == [5]  # wid 4 had its own copy


@pytest.mark.parametrize("how", ["read", "read stops half-way",
                                 pytest.param("messages", marks=pytest.mark.long)])  # (make test's budget)
def test_a_replacement_on_its_holders_node_reads_its_copy_from_the_holders_memory(dpmpi_run, how):
    """On one node the replacement reads its copy out of the holder's replica slot
    (process_vm_readv on its copy threads, checksummed as it arrives). When that read stops
    half-way (test hook), the copy is sent as messages in a second round; with
    DPMPI_RESTORE_PULL=0 it always is. Bit for bit every way."""
    env = {"DPMPI_RESTORE_PULL": "0"} if how == "messages" else {}
    extra = ["--fail-read"] if how == "read stops half-way" else []
    job = dpmpi_run(5, "snap.py", "--sync", "--swap", *extra, launcher_args=["--spares", "1"],
                    faults="2:committed@5:KILL", env=env)
    finished(job)
    events = {e["wid"]: e for e in restored(job)}
    assert {w: e["epoch"] for w, e in events.items()} == {0: 5, 1: 5, 3: 5, 4: 5}
    want = {"read": True, "read stops half-way": "code 1", "messages": None}[how]
    assert {w: e["detail"]["read"] for w, e in events.items()} == {0: None, 1: None, 3: None, 4: want}
    assert events[4]["detail"]["direct"]
    assert sorted(w for w, e in events.items() if "resend" in e["detail"]["ms"]) == \
        ([0, 1, 3, 4] if how == "read stops half-way" else [])


def test_kill_during_staging_everyone_restores_the_previous_epoch(dpmpi_run):
    # 16 MiB per rank: the staging copy of epoch 6 is in flight when rank 2 is killed (the fault
    # point follows the start of the copy at once), its replication streamed (pieces sent as copied)
    job = dpmpi_run(5, "snap.py", "--sync", "--mib", 16, launcher_args=["--spares", "1"], faults="2:staged@6:KILL",
                    timeout=120, env={"DPMPI_REPL_STREAM": "1"})
    finished(job)
    assert {e["epoch"] for e in restored(job)} == {5}


def test_two_copies_survive_a_rank_and_its_first_buddy(dpmpi_run):
    # rank 3 dies after committing epoch 5, rank 2 (whose first buddy it is) inside the repair of
    # that death, so one repair covers both (TOGETHER below says why not both at "committed@5")
    job = dpmpi_run(6, "snap.py", "--sync", "--replicas", 2, launcher_args=["--spares", "2"],
                    faults="3:committed@5:KILL,2:repair@1:KILL")
    finished(job)
    events = restored(job)
    assert {e["epoch"] for e in events} == {5} and len(events) == 4


# A rank and its only buddy lost together: rank 3 dies after committing epoch 5 and rank 2 inside
# the repair of that death, so one repair covers both. (Both killed at "committed@5" was timing-
# dependent: since the watcher tells Open MPI of a death at once, rank 3's commit sometimes failed
# on rank 2's death before rank 3 reached its own fault point, and it died one epoch later.)
TOGETHER = "3:committed@5:KILL,2:repair@1:KILL"


def test_a_rank_and_its_only_buddy_lost_together(dpmpi_run):
    job = dpmpi_run(6, "snap.py", "--sync", launcher_args=["--spares", "2"], faults=TOGETHER)
    assert job.returncode == 0, job.stderr
    lost = [e for e in job.events if e["event"] == "lost"]
    assert sorted(e["rank"] for e in lost) == [0, 1, 2, 3], job.stdout  # every rank raised, none hung
    assert all(e["ranks"] == [2] and "rank(s) [2]" in e["message"] for e in lost)
    assert not [e for e in job.events if e["event"] in ("restored", "done")]


def test_a_rank_and_its_only_buddy_lost_falls_back_to_disk(dpmpi_run, tmp_path):
    job = dpmpi_run(6, "snap.py", "--sync", "--persist", tmp_path / "snaps", launcher_args=["--spares", "2"],
                    faults=TOGETHER)
    finished(job)
    events = restored(job)
    assert {e["epoch"] for e in events} == {5} and all(e["detail"].get("from_disk") for e in events)
    assert "restoring epoch 5 from" in job.stderr


def test_a_directory_an_earlier_job_used_is_not_taken_for_this_ones(dpmpi_run, tmp_path):
    """persist_dir holding an earlier job's newer epochs (11 and 12): this job kept only those
    (it pruned its own files by epoch number) and restored epoch 12 from them, going on from
    the other job's state with exit code 0 (fifty-first session). Its files now carry the job's
    tag: it restores its own epoch 5, and the earlier job's files stay as they were."""
    snaps = tmp_path / "snaps"
    first = dpmpi_run(6, "snap.py", "--sync", "--epochs", "12", "--persist", snaps, launcher_args=["--spares", "2"])
    assert first.returncode == 0, first.stdout + first.stderr
    earlier = sorted(os.listdir(snaps))
    assert len(earlier) == 8 and all(".epoch000000001" in name for name in earlier), earlier
    job = dpmpi_run(6, "snap.py", "--sync", "--persist", snaps, launcher_args=["--spares", "2"], faults=TOGETHER)
    finished(job)
    events = restored(job)
    assert {e["epoch"] for e in events} == {5} and all(e["detail"].get("from_disk") for e in events), job.stdout
    assert set(earlier) <= set(os.listdir(snaps))


def test_a_second_runtime_on_the_same_directory_restores_its_own_files(dpmpi_run, tmp_path):
    """Two Runtimes one after the other on one persist_dir (a training's phases), a rank and its
    copy's holder lost in the second: its disk fallback restored the first Runtime's last epoch
    (its files had the newer numbers; the second's own were pruned) and the job ended with
    another result, exit code 0 (fifty-first session). Each Snapshot's files now carry their
    own tag (dpmpi.snapshot.persistence.snapshot_tag)."""
    clean = dpmpi_run(6, "phases_persist.py", 60, tmp_path / "clean", launcher_args=["--spares", "2"])
    assert clean.returncode == 0, clean.stdout + clean.stderr
    want = {e["rank"]: e["digest"] for e in clean.events}
    log = tmp_path / "events.jsonl"
    job = dpmpi_run(6, "phases_persist.py", 60, tmp_path / "killed", launcher_args=["--spares", "2"],
                    faults="0:step@150:KILL,1:repair@1:KILL", env={"DPMPI_EVENTS": str(log)})
    assert job.returncode == 0, job.stdout + job.stderr
    assert {e["rank"]: e["digest"] for e in job.events} == want and sorted(want) == [0, 1, 2, 3], job.stdout
    restored = [json.loads(line) for line in log.read_text().splitlines() if '"restored"' in line]
    assert restored and all(e["detail"].get("from_disk") and e["epoch"] <= 30 for e in restored), restored


def test_a_job_restarted_from_disk_recovers_a_death_after_its_load(dpmpi_run, tmp_path):
    """A job that restarts from its persist_dir with Snapshot.load (docs/cluster.md's advice for a
    lost node), then loses a rank: the replacement runs the program from its start and loads
    again. Its load's allgather waited for ever for the survivors, which were restoring: the job
    hung (fifty-first session, bench/strangers/restart_step.py). It is now answered from the
    survivors' record, so the replacement loads what they loaded and the job ends as one never
    stopped."""
    want = dpmpi_run(5, "restart_load.py", 80, tmp_path / "once", launcher_args=["--spares", "1"])
    assert want.returncode == 0, want.stdout + want.stderr
    first = dpmpi_run(5, "restart_load.py", 40, tmp_path / "twice", launcher_args=["--spares", "1"])
    assert first.returncode == 0, first.stdout + first.stderr
    job = dpmpi_run(5, "restart_load.py", 80, tmp_path / "twice", launcher_args=["--spares", "1"],
                    faults="2:step@20:KILL", timeout=60)
    assert job.returncode == 0, job.stdout + job.stderr
    final = {e["rank"]: e for e in job.events}
    assert {r: e["digest"] for r, e in final.items()} == {e["rank"]: e["digest"] for e in want.events}, job.stdout
    assert {e["started_at"] for e in final.values()} == {40} and final[2]["role"] == "RECOVERED", final


@pytest.mark.parametrize("fault", [pytest.param("0:staged@3:KILL", marks=pytest.mark.long),
                                   pytest.param("1:committed@4:KILL", marks=pytest.mark.long),
                                   pytest.param("3:staged@7:KILL", marks=pytest.mark.long),  # (make test's budget)
                                   "1:committed@2:KILL,2:staged@6:KILL"])
def test_unsynchronised_kills_restore_one_consistent_epoch(dpmpi_run, fault):
    """No waiting for replication: a kill can land anywhere in it, streamed (each piece sent as
    soon as it is copied); all ranks still agree on one epoch whose copies are intact, and
    finish with the failure-free state."""
    spares = fault.count(",") + 1
    job = dpmpi_run(4 + spares, "snap.py", "--mib", 16, launcher_args=["--spares", str(spares)], faults=fault,
                    env={"DPMPI_REPL_STREAM": "1"})
    finished(job)
    events = restored(job)
    by_repair: dict = {}
    for e in events:
        by_repair.setdefault(e["repair"], set()).add(e["epoch"])
    assert len(by_repair) == spares and all(len(v) == 1 for v in by_repair.values()), events  # one epoch each
    first_kill = int(fault.split(",")[0].split("@")[1].split(":")[0])
    assert all(e["epoch"] >= first_kill - 2 for e in events), events  # at most two epochs rolled back


def test_a_snapshot_communicator_made_on_some_ranks_only_does_not_hang_the_job(dpmpi_run, activate_faults):
    """A death inside the Dup that makes the snapshot's communicator (at the first commit, and in
    every restore) can leave it made on some processes only (Open MPI's agreement on the parent
    is not uniform): one rank then waited in the allgather after the Dup, for ever, for a live
    peer that had gone to the repair, and the others in its Shrink (2 hangs in ~25 runs with a
    rank killed inside it, KILL_IN_ACTIVATE=R:3; 0 in 60 after). Here without a death: rank 1's
    Dup (its third communicator) is reported failed after it completed (a preloaded fault),
    which hung the job in 1 run of 1. Now the others leave the Dup's warm-up when the repair
    revokes the active communicator, and the job ends as a failure-free run."""
    job = dpmpi_run(5, "snap.py", "--mib", 1, launcher_args=["--spares", "1"], timeout=60,
                    env={"LD_PRELOAD": str(activate_faults), "FAIL_AFTER_ACTIVATE": "1:3"})
    assert "[fail-after-activate] rank 1 at 3" in job.stderr, job.stderr
    finished(job)
    caught = {e["wid"]: e["error"] for e in job.events if e["event"] == "caught"}
    assert caught == {0: "RevokedError", 1: "ProcFailedError", 2: "RevokedError", 3: "RevokedError"}, job.stdout
    assert {e["epoch"] for e in restored(job)} == {1}


def test_commit_returns_only_when_the_epoch_survives_a_failure(dpmpi_run):
    # rank 2 dies right after commit(5) returned, with no wait(): every rank restores epoch 5
    # (before commit was durable, all restored epoch 4 in 5 of 5 runs)
    job = dpmpi_run(5, "snap.py", "--mib", 16, launcher_args=["--spares", "1"], faults="2:committed@5:KILL")
    finished(job)
    assert {e["epoch"] for e in restored(job)} == {5}


def test_overlapped_commit_still_restores_a_consistent_epoch(dpmpi_run):
    job = dpmpi_run(5, "snap.py", "--mib", 16, "--overlap", launcher_args=["--spares", "1"],
                    faults="2:committed@5:KILL")
    finished(job)
    assert len({e["epoch"] for e in restored(job)}) == 1


DIRTY = ("Segmentation fault", "Address not mapped", "OPAL ERROR", "signal", "MPI_ERRORS_ARE_FATAL")


@pytest.mark.parametrize("n", [3, pytest.param(5, marks=pytest.mark.long)])  # (make test's budget)
def test_a_snapshot_never_closed_ends_cleanly(dpmpi_run, n):
    # a program that never calls close() and whose last replication is still running at exit:
    # the slots were freed while MPI still had requests on them (segfault at exit, 3 of 3 runs
    # with 2 active ranks + 1 spare); dpmpi now closes open snapshots before MPI ends
    job = dpmpi_run(n, "snap.py", "--mib", 2, "--epochs", 20, "--overlap", "--no-close",
                    launcher_args=["--spares", "1"])
    assert job.returncode == 0, job.stderr
    done = job.by_rank("done")
    assert sorted(done) == list(range(n - 1)) and all(e["digest"] == e["want"] for e in done.values())
    assert not [d for d in DIRTY if d in job.stderr], job.stderr


def test_a_replication_that_waits_long_says_what_it_waits_for(dpmpi_run):
    job = dpmpi_run(2, "repl_report.py", env={"DPMPI_REPL_REPORT": "0.2"})
    assert job.returncode == 0, job.stdout + job.stderr
    done = job.by_rank("done")
    assert done[0]["running_after"] == 1 and done[0]["rc"] == 0 and done[1]["rc"] == 0, done
    reports = [line for line in job.stderr.splitlines() if "snapshot replication job" in line]
    assert len(reports) == 1, job.stderr
    assert "rank 0 of 2" in reports[0] and "phase data" in reports[0], reports
    assert f"recv from 1 tag 7102 ({1 << 20} B)" in reports[0], reports


@pytest.mark.long  # (make test's budget: fresh-clone runs took 155-192 s)
def test_two_ranks_dying_in_the_same_commit_with_copies_everywhere_are_replaced(dpmpi_run):
    """examples/primitives.py (Jacobi) at 4 + 3 with replicas=3 (every rank receives every
    other's copy), ranks 0 and 2 killed as they enter the same commit: the survivors' replication
    jobs must fail so that a repair starts. A replication that posted its receives a few at a time
    over the whole job (not per peer) hung here 3 of 3 times: it waited, in order, on a survivor
    that never sent and never posted its receive from a dead rank (sixteenth session)."""
    from pathlib import Path

    program = str(Path(__file__).resolve().parent.parent / "examples" / "primitives.py")
    args = ("--model", "jacobi", "--steps", 30, "--replicas", 3)
    digests = []
    for faults in ("", "0:snapshot-commit@4:KILL,2:snapshot-commit@4:KILL"):
        job = dpmpi_run(7, program, *args, launcher_args=["--spares", "3"], faults=faults, timeout=40)
        assert job.returncode == 0, job.stdout + job.stderr
        final = {e["rank"]: e for e in job.events if e["event"] == "final"}
        assert sorted(final) == [0, 1, 2, 3] and all(e["step"] == 30 for e in final.values()), job.stdout
        digests.append({r: e["digest"] for r, e in final.items()})
    assert digests[1] == digests[0]
    assert [final[r]["role"] for r in range(4)] == ["RECOVERED", "SURVIVOR", "RECOVERED", "SURVIVOR"], final
    # (the two kills' own lines say "signal")
    assert not [d for d in DIRTY if d != "signal" and d in job.stderr], job.stderr


def test_a_rank_dying_in_the_first_commit_of_a_primitives_program_is_recovered(dpmpi_run):
    """examples/primitives.py, rank 2 killed as it enters its first commit (the others inside
    it): no epoch exists for rank 2, and every rank's arrays still hold the state it built, so
    restore(carry=-1, as_built=True) returns -1 and the program commits epoch 0 again. Before the
    fifteenth session the example ended with SnapshotLostError on every rank."""
    final = _primitives_against_failure_free(dpmpi_run, "2:snapshot-commit@1:KILL")
    assert final[2]["role"] == "RECOVERED" and final[2]["restored"] == [0], final[2]


_primitives_failure_free: dict = {}  # steps -> digests of this pytest process's failure-free run


def _primitives_against_failure_free(dpmpi_run, faults: str, steps: int = 20) -> dict:
    """examples/primitives.py at 4 + 1, failure-free (once per pytest process) and then with
    ``faults``: both exit 0 with every rank's final line at ``steps``, the same digests. The
    faulted run's final lines."""
    from pathlib import Path

    program = str(Path(__file__).resolve().parent.parent / "examples" / "primitives.py")

    def finals(plan):
        job = dpmpi_run(5, program, "--steps", steps, launcher_args=["--spares", "1"], faults=plan)
        assert job.returncode == 0, job.stdout + job.stderr
        final = {e["rank"]: e for e in job.events if e["event"] == "final"}
        assert sorted(final) == [0, 1, 2, 3] and all(e["step"] == steps for e in final.values()), job.stdout
        return final

    if steps not in _primitives_failure_free:
        _primitives_failure_free[steps] = {r: e["digest"] for r, e in finals("").items()}
    final = finals(faults)
    assert {r: e["digest"] for r, e in final.items()} == _primitives_failure_free[steps]
    return final


def test_a_rank_dying_after_the_last_commit_of_a_primitives_program_is_recovered(dpmpi_run):
    """examples/primitives.py, rank 2 killed after its last commit returned, as it enters the
    barrier that ends the loop: the others, in that barrier, repair, and rank 2's replacement
    restores the final epoch. Before the barrier, the others left the program with nothing to
    repair around the dead rank: its result was lost and dpmpi-run exited 1 (chaos, jacobi-prim,
    a rank killed in its last restore's own part after a repair at the end)."""
    final = _primitives_against_failure_free(dpmpi_run, "2:Barrier@1:KILL")
    assert final[2]["role"] == "RECOVERED" and final[2]["restored"] == [20], final[2]
    assert all(final[r]["restored"] == [20] for r in (0, 1, 3)), final


def test_a_death_during_the_last_replication_does_not_hold_the_others_at_exit(dpmpi_run):
    """Rank 2 dies while the replication of a commit(durable=False) is in flight, and the
    others end the program. A job that the death failed on one rank (its receive from rank 2)
    left that rank's close with nothing to wait for, while its peers' jobs waited for its barrier
    messages through the close's 30 s grace: the job took 34 s instead of 2, and each said it
    was still waiting. Now the close of a failed job revokes the snapshot communicator."""
    # (no launch again: rank 2's "[dpmpi-committed]" line can reach dpmpi-run after its death's
    # report, and the death then counts as one in the setup: the job ran twice, 1 fresh make test)
    job = dpmpi_run(4, "dies_in_last_replication.py", env={"DPMPI_REPL_REPORT": "5", "DPMPI_START_RETRIES": "0"},
                    timeout=60)
    assert job.returncode == 1, job.stdout + job.stderr  # (rank 2's death: nothing repaired it)
    assert "rank 2 died" in job.stderr, job.stderr
    assert sorted(e["rank"] for e in job.events if e["event"] == "done") == [0, 1, 3], job.stdout
    assert "still running after" not in job.stderr, job.stderr


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs: a rank bound to one, one left free")
@pytest.mark.parametrize("setting", ["auto", "none"])
def test_the_copy_thread_runs_on_the_cores_no_rank_is_bound_to(dpmpi_run, setting):
    # dpmpi-run binds a rank to one core; the snapshot's copy thread ran there too and took the
    # step's core (stage() of 64 MiB blocked its caller 3.6 ms, bench/stage_binding.py). With
    # DPMPI_HELPER_CPUS=auto (the default) it runs on the cores no process of the job is bound to
    job = dpmpi_run(1, "helper_cpus.py", env={"DPMPI_HELPER_CPUS": setting})
    assert job.returncode == 0, job.stderr
    (cpus,) = [e for e in job.events if e["event"] == "cpus"]
    free = sorted(os.sched_getaffinity(0) - set(cpus["main"]))
    assert len(cpus["main"]) == 1 and free, cpus  # (dpmpi-run bound the rank to one core)
    assert cpus["copy"] == (free if setting == "auto" else cpus["main"]), cpus
