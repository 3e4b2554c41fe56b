"""dpmpi.Snapshot across ranks with real failures: each test is a dpmpi-run job (4 active ranks
plus spares) of tests/programs/snap.py, judged from its JSON lines: every restored array must
equal, bit for bit, what that logical rank held at the restored epoch."""
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
    events = restored(job)
    assert sorted(e["wid"] for e in events) == [0, 1, 3, 4]
    assert all(e["epoch"] == 5 for e in events)
    assert [e["wid"] for e in events if e["detail"]["received"]] == [4]  # only the replacement got a copy


def test_kill_during_staging_everyone_restores_the_previous_epoch(dpmpi_run):
    # 64 MiB per rank: the staging copy of epoch 6 is in flight when rank 2 is killed
    job = dpmpi_run(5, "snap.py", "--sync", "--mib", 64, launcher_args=["--spares", "1"], faults="2:staged@6:KILL",
                    timeout=120)
    finished(job)
    assert {e["epoch"] for e in restored(job)} == {5}


def test_two_copies_survive_a_rank_and_its_first_buddy(dpmpi_run):
    job = dpmpi_run(6, "snap.py", "--sync", "--replicas", 2, launcher_args=["--spares", "2"],
                    faults="2:committed@5:KILL,3:committed@5:KILL")
    finished(job)
    events = restored(job)
    assert {e["epoch"] for e in events} == {5} and len(events) == 4


def test_a_rank_and_its_only_buddy_lost_together(dpmpi_run):
    job = dpmpi_run(6, "snap.py", "--sync", launcher_args=["--spares", "2"],
                    faults="2:committed@5:KILL,3:committed@5:KILL")
    assert job.returncode == 0, job.stderr
    lost = [e for e in job.events if e["event"] == "lost"]
    assert sorted(e["rank"] for e in lost) == [0, 1, 2, 3], job.stdout  # every rank raised, none hung
    assert all(e["ranks"] == [2] and "rank(s) [2]" in e["message"] for e in lost)
    assert not [e for e in job.events if e["event"] in ("restored", "done")]


def test_a_rank_and_its_only_buddy_lost_falls_back_to_disk(dpmpi_run, tmp_path):
    job = dpmpi_run(6, "snap.py", "--sync", "--persist", tmp_path / "snaps", launcher_args=["--spares", "2"],
                    faults="2:committed@5:KILL,3:committed@5:KILL")
    finished(job)
    events = restored(job)
    assert {e["epoch"] for e in events} == {5} and all(e["detail"].get("from_disk") for e in events)
    assert "restoring epoch 5 from" in job.stderr


@pytest.mark.parametrize("fault", ["0:staged@3:KILL", "1:committed@4:KILL", "3:staged@7:KILL",
                                   "1:committed@2:KILL,2:staged@6:KILL"])
def test_unsynchronised_kills_restore_one_consistent_epoch(dpmpi_run, fault):
    """No waiting for replication: a kill can land anywhere in it; all ranks still agree on one
    epoch whose copies are intact, and finish with the failure-free state."""
    spares = fault.count(",") + 1
    job = dpmpi_run(4 + spares, "snap.py", "--mib", 16, launcher_args=["--spares", str(spares)], faults=fault)
    finished(job)
    events = restored(job)
    by_repair: dict = {}
    for e in events:
        by_repair.setdefault(e["repair"], set()).add(e["epoch"])
    assert len(by_repair) == spares and all(len(v) == 1 for v in by_repair.values()), events  # one epoch each
    first_kill = int(fault.split(",")[0].split("@")[1].split(":")[0])
    assert all(e["epoch"] >= first_kill - 2 for e in events), events  # at most two epochs rolled back
