"""The failure watcher in jobs: a rank dies early in a long step and the survivors' repair starts
long before the step would have ended (on the node: pidfds; ULFM's own detection when forced),
the result is bit for bit the failure-free one, and a second death inside the repair does not
interrupt it. Each test is one dpmpi-run job (tests/programs/watch_step.py)."""
import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "programs"))
import watch_step  # noqa: E402

STEP_S = 1.0  # --seconds (a test may give another): half before the step's Allreduce, half in the update, in 4 chunks
STEPS = 2  # the kills strike step 1


def run(dpmpi_run, n, spares, faults="", env=None, *args):
    job = dpmpi_run(n, "watch_step.py", "--steps", STEPS, "--seconds", STEP_S, *args, faults=faults, env=env,
                    launcher_args=["--spares", str(spares)], timeout=150)
    assert job.returncode == 0, f"exit code {job.returncode}\n{job.stdout[-3000:]}\n{job.stderr[-3000:]}"
    finals = job.by_rank("final")
    size = n - spares
    assert sorted(finals) == list(range(size)), job.stdout[-3000:] + job.stderr[-3000:]
    want = watch_step.expected(STEPS, size)
    for r, e in finals.items():  # bit for bit the failure-free state, on every rank
        assert (e["step"], e["digest"]) == (STEPS, want), (r, e)
    return job, finals


def kill_time(job):
    (fault,) = [f for f in job.faults() if f["kind"] == "KILL"][:1]
    return fault["time"]


def survivors(finals, victims):
    return {r: e for r, e in finals.items() if r not in victims}


def test_a_long_sleep_step_is_interrupted_at_the_death(dpmpi_run):
    # rank 1 dies at the start of step 1: the others are in the step's first 0.3 s of sleep, then
    # 0.3 s of update; without the watcher they would notice at the step's Allreduce (~0.3 s later)
    step_s = 0.6
    job, finals = run(dpmpi_run, 4, 1, "1:step@2:KILL", None, "--seconds", step_s)
    t_kill = kill_time(job)
    for r, e in survivors(finals, {1}).items():
        (rec,) = e["recoveries"]
        assert rec["detected_by"].startswith("pidfd") and rec["error"] == "ProcFailedError", rec
        assert rec["noticed_at"] - t_kill < 0.2 * step_s, rec  # measured here: 2-10 ms
        assert rec["repaired_at"] - t_kill < 0.25 * step_s, rec  # ULFM's shrink: 10-30 ms more
        assert e["watch"]["interrupts"] == 1 and e["watch"]["peers"] == 2, e["watch"]
        assert e["watch"]["told"] == 1, e["watch"]  # it told its Open MPI of the death (once)
    assert finals[1]["wid"] == 3 and finals[1]["role"] == "RECOVERED"
    # the spare that replaced rank 1 watched the actives while idle, to tell its Open MPI too
    assert finals[1]["watch"]["told"] == 1, finals[1]["watch"]


@pytest.mark.long  # (make test's budget)
def test_without_telling_open_mpi_the_repair_still_completes(dpmpi_run):
    job, finals = run(dpmpi_run, 4, 1, "1:step@2:KILL", {"DPMPI_WATCH_TELL": "0"}, "--seconds", 0.5)
    for r, e in survivors(finals, {1}).items():
        (rec,) = e["recoveries"]
        assert rec["detected_by"].startswith("pidfd") and e["watch"]["told"] == -1, (rec, e["watch"])


def test_a_numpy_step_is_interrupted_in_its_compute(dpmpi_run):
    # rank 2 dies at the start of step 1: the survivors are between numpy calls of its compute
    # (or, lagging, at the end of step 0's update, where a failure is raised since the
    # twenty-third session: test_workloads.py, the thread-pool update); their steps' length is
    # measured in the same job. (A kill later in the compute, tick@10, let a survivor that ran
    # ahead reach the step's Allreduce, where MPI's revoke, not the watcher, told it: 1 run.)
    job, finals = run(dpmpi_run, 4, 1, "2:step@2:KILL", None, "--work", "numpy", "--iters", 20000)
    t_kill = kill_time(job)
    steps = [e for e in job.events if e["event"] == "step"]
    step_s = statistics.median(e["t1"] - e["t0"] for e in steps)
    assert step_s > 0.2, step_s
    recs = [rec for e in survivors(finals, {2}).values() for (rec,) in [e["recoveries"]]]  # (one each)
    assert len(recs) == 2, finals  # (3 active ranks + 1 spare)
    # the first to notice is a watcher; another survivor may be told by its revoke (or by its own
    # snapshot replication, which sends to the dead rank) before its own watcher's notice: seen
    # once in a full make test. What is tested is the time: no survivor waits out its compute.
    assert any(rec["detected_by"].startswith("pidfd") for rec in recs), recs
    for rec in recs:
        assert rec["caught_at"] - t_kill < 0.25 * step_s, (rec, step_s)
        assert rec["repaired_at"] - t_kill < 0.5 * step_s, (rec, step_s)


@pytest.mark.long  # (make test's time budget; make test-long runs it)
def test_ulfm_detection_alone_interrupts_the_step_too(dpmpi_run):
    # no pidfds: the watcher's receive on its own communicator (what peers on other nodes rely on)
    env = {"DPMPI_WATCH_PIDFD": "0", "DPMPI_WATCH_ULFM": "1"}
    job, finals = run(dpmpi_run, 4, 1, "1:step@2:KILL", env)
    t_kill = kill_time(job)
    for r, e in survivors(finals, {1}).items():
        (rec,) = e["recoveries"]
        assert rec["detected_by"] == "ulfm", rec
        assert rec["repaired_at"] - t_kill < 0.25 * STEP_S, rec
        assert e["watch"]["ulfm"] is True and e["watch"]["peers"] == 0, e["watch"]
        assert e["watch"]["tests"] > 0


def test_a_second_death_inside_the_repair_does_not_interrupt_it(dpmpi_run):
    # rank 1 dies in a step; rank 2 dies inside the repair that replaces it (the commit
    # agreement fails and Respawn starts again): the survivor's interruption comes once, at the
    # first death, and the repair is never cut short (one recovery attempt at the runtime's level).
    # replicas=2: with 3 ranks, any two hold each other's only copy otherwise
    job, finals = run(dpmpi_run, 5, 2, "1:step@2:KILL,2:repair-agree@1:KILL", None, "--replicas", 2,
                      "--seconds", 0.5)
    assert {finals[1]["wid"], finals[2]["wid"]} == {3, 4}, finals
    e = finals[0]
    (rec,) = e["recoveries"]
    assert rec["detected_by"].startswith("pidfd") and rec["attempts"] == 1, rec
    assert rec["repair"]["attempts"] >= 2, rec["repair"]  # the second death restarted the repair
    assert e["watch"]["interrupts"] == 1, e["watch"]


@pytest.mark.long  # (make test's time budget; make test-long runs it)
def test_without_failures_the_watcher_costs_nothing_visible(dpmpi_run):
    job, finals = run(dpmpi_run, 4, 1, "", None, "--seconds", 0.4)
    for r, e in finals.items():
        w = e["watch"]
        assert e["recoveries"] == [] and w["interrupts"] == 0 and w["signals"] == 0, w
        assert w["peers"] == 2 and w["pidfds"] in (2, 4) and w["ulfm"] is False and w["tests"] == 0
        assert w["told"] == 0, w  # no death to tell of
        assert w["wakeups"] <= 2, w  # it slept in poll() the whole job (one wake-up per re-arm)
        assert 0 <= w["thread_cpu_s"] <= 0.02, w
    assert "Traceback" not in job.stderr and "dpmpi:" not in job.stderr, job.stderr[-2000:]
