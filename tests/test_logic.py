"""Tier 1: pure logic, no MPI initialised (fault plans, launcher arguments, exit codes)."""
import os
import subprocess
import sys

import pytest

from dpmpi import faults, run
from dpmpi.faults import Fault, InjectedFault, Kind


# ---- fault plans -----------------------------------------------------------------------------
def test_parse_spec():
    assert faults.parse("2:Allreduce@50:KILL, 0:time@1.5:term;1:step:exception") == [
        Fault(2, "Allreduce", Kind.KILL, 50),
        Fault(0, "time", Kind.TERM, 1.5),
        Fault(1, "step", Kind.EXCEPTION, 1),
    ]
    assert faults.parse("") == []
    assert Fault(3, "Send", "hang", 2).spec() == "3:Send@2:HANG"


@pytest.mark.parametrize(
    "spec, words",
    [
        ("2:Allreduce", "RANK:POINT[@N]:KIND"),
        ("x:Allreduce:KILL", "not an int"),
        ("2:Allreduce@0:KILL", "int >= 1"),
        ("2:Allreduce@1.5:KILL", "int >= 1"),
        ("2:Allreduce@ten:KILL", "not an int >= 1"),
        ("2:time@soon:KILL", "not a number of seconds"),
        ("2:Allreduce@3:EXPLODE", "unknown fault kind"),
        ("2:time@-1:KILL", "seconds >= 0"),
    ],
)
def test_bad_spec_names_the_problem(spec, words):
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace("]", r"\]")):
        faults.parse(spec)


def test_fault_validates_fields():
    with pytest.raises(ValueError, match="world rank"):
        Fault(-1, "x", Kind.KILL)
    with pytest.raises(ValueError, match="point"):
        Fault(0, "a:b", Kind.KILL)
    with pytest.raises(ValueError, match="kind"):
        Fault(0, "a", 5)
    with pytest.raises(TypeError):
        faults.parse(42)
    with pytest.raises(TypeError, match="Fault objects"):
        faults.plan(["2:x:KILL"])


def test_plan_keeps_only_this_ranks_faults_in_its_first_life(monkeypatch):
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "2")
    try:
        assert faults.plan("2:step@3:EXCEPTION,1:step@1:KILL") == [Fault(2, "step", Kind.EXCEPTION, 3)]
        faults.point("step")
        faults.point("other")
        faults.point("step")
        with pytest.raises(InjectedFault, match="rank 2 at step@3"):
            faults.point("step")
        faults.point("step")  # fires once only
        monkeypatch.setenv(faults.ENV_REPLACEMENT, "1")
        assert faults.plan("2:step@1:KILL") == []  # a replacement never re-fails
    finally:
        faults.clear()


def test_load_env_names_the_variable(monkeypatch):
    monkeypatch.setenv("DPMPI_FAULTS", "2:oops")
    with pytest.raises(ValueError, match="DPMPI_FAULTS='2:oops'"):
        faults.load_env()


# ---- launcher --------------------------------------------------------------------------------
def test_parse_args_splits_mpirun_options_from_program():
    o = run.parse_args(["-n", "5", "--spares", "1", "--mca", "btl", "tcp,self", "--", "python", "p.py", "-n", "3"])
    assert (o.n, o.spares, o.dry_run) == (5, 1, False)
    assert o.mpirun_args == ["--mca", "btl", "tcp,self"]
    assert o.program == ["python", "p.py", "-n", "3"]


def test_build_command(monkeypatch):
    monkeypatch.setattr(run.os, "cpu_count", lambda: 2)
    env = {}
    cmd = run.build(run.parse_args(["-n", "4", "--spares", "1", "--", "python", "p.py"]), "/x/mpirun", env)
    assert cmd[:3] == ["/x/mpirun", "--with-ft", "ulfm"]
    assert cmd[3:6] == ["--mca", "btl", "^ofi"]
    assert "--oversubscribe" in cmd
    assert cmd[-4:] == ["-n", "4", "python", "p.py"]
    assert env["DPMPI_SPARES"] == "1" and env["DPMPI_STATUS"] == "1"
    assert ["-x", "DPMPI_SPARES"] == cmd[cmd.index("DPMPI_SPARES") - 1 : cmd.index("DPMPI_SPARES") + 1]
    assert env["PYTHONPATH"].split(":")[0].endswith("_boot")
    # the user's own btl choice and host list win
    cmd = run.build(run.parse_args(["-n", "8", "--mca", "btl", "tcp,self", "--host", "a:8", "--", "p"]), "m", {})
    assert "^ofi" not in cmd and "--oversubscribe" not in cmd


@pytest.mark.parametrize(
    "argv, words",
    [
        (["-n", "0", "--", "p"], "-n must be at least 1"),
        (["-n", "4", "--spares", "-1", "--", "p"], "--spares must be >= 0"),
        (["-n", "4", "--spares", "4", "--", "p"], "leaves no active rank"),
        (["-n", "4", "--"], "missing the program"),
        (["-n", "4", "p.py"], "missing '--'"),
        (["--", "p"], "missing -n"),
        (["-n", "four", "--", "p"], "takes an integer"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(argv, words):
    proc = subprocess.run([sys.executable, "-m", "dpmpi.run", *argv], capture_output=True, text=True, cwd="/")
    assert proc.returncode == 2
    first = proc.stderr.splitlines()[0]
    assert first.startswith("dpmpi-run: ") and words in first
    assert "Traceback" not in proc.stderr


def test_dry_run_prints_the_command():
    proc = subprocess.run([sys.executable, "-m", "dpmpi.run", "-n", "3", "--dry-run", "--", "python", "x.py"],
                          capture_output=True, text=True, cwd="/")
    assert proc.returncode == 0
    assert "--with-ft ulfm" in proc.stdout and proc.stdout.rstrip().endswith("-n 3 python x.py")


def ok(rank, recovered=()):
    return {"rank": rank, "status": 0, "recovered": list(recovered)}


def bad(rank, status=1, cause="x"):
    return {"rank": rank, "status": status, "cause": cause, "recovered": []}


@pytest.mark.parametrize(
    "n, records, mpirun_rc, expected",
    [
        (2, {}, 0, 0),  # no dpmpi in the ranks: mpirun decides
        (2, {}, 7, 7),
        (2, {0: ok(0), 1: ok(1)}, 0, 0),
        (3, {0: ok(0, [2]), 1: ok(1, [2]), 2: bad(2, 3)}, 0, 0),  # recovered
        (3, {0: ok(0, [2]), 1: ok(1, [2])}, 0, 0),  # rank 2 SIGKILLed (no record), recovered
        (3, {0: ok(0), 1: ok(1)}, 0, 1),  # rank 2 SIGKILLed (no record), nobody repaired around it
        (3, {0: ok(0, [1]), 2: bad(2, 5)}, 0, 5),  # rank 2's failure was not repaired around
        (3, {0: bad(0, 1), 1: bad(1, 1), 2: bad(2, 3)}, 0, 1),  # nobody completed
        (2, {0: bad(0, 2), 1: bad(1, 2)}, 0, 2),
        (3, {0: ok(0), 1: ok(1), 2: bad(2, 4)}, 0, 4),  # completed without repairing: rank 2's work is lost
        (3, {0: ok(0), 1: dict(ok(1), idle_spares=[2])}, 0, 0),  # rank 2 died as an idle spare: nothing lost
        (3, {0: ok(0), 1: dict(ok(1), idle_spares=[1])}, 0, 1),  # ... but not when another rank was the idle spare
    ],
)
def test_job_exit_code(n, records, mpirun_rc, expected):
    # n is the job's size: a rank below n without a record died by a signal
    assert run.job_exit_code(n, records, mpirun_rc)[0] == expected


def test_python_ranks_that_all_died_by_signal_fail_the_job():
    # seen: both ranks segfaulted in MPI, mpirun --with-ft ulfm returned 0, and so did dpmpi-run
    code, account = run.job_exit_code(2, {}, 0, expect_records=True)
    assert code == 1 and "every rank died" in account
    assert run.is_python(["/x/.venv/bin/python3", "p.py"]) and run.is_python(["./train.py"])
    assert not run.is_python(["hostname"])


# ---- hot-swap planning (pure) ------------------------------------------------------------------
def _plan():
    from dpmpi.resilient import Plan

    return Plan(0, (0, 1, 2, 3), (4, 5))


def test_plan_fills_failed_ranks_from_spares_in_order():
    from dpmpi.resilient import plan_repair

    new, failed, filled, renumber = plan_repair(_plan(), {0, 2, 3, 4, 5}, "shrink")
    assert (new.epoch, new.actives, new.spares) == (1, (0, 4, 2, 3), (5,))
    assert failed == [1] and filled == {1: "spare:4"} and renumber == {0: 0, 1: 1, 2: 2, 3: 3}


def test_plan_skips_dead_spares_and_shrinks_when_they_run_out():
    from dpmpi.resilient import plan_repair

    new, failed, filled, renumber = plan_repair(_plan(), {0, 3, 5}, "shrink")
    assert new.actives == (0, 5, 3) and new.spares == ()
    assert filled == {1: "spare:5", 2: "dropped"} and renumber == {0: 0, 1: 1, 3: 2}


def test_plan_abort_policy_raises():
    from dpmpi.resilient import SparesDepletedError, plan_repair

    with pytest.raises(SparesDepletedError, match=r"logical rank\(s\) \[2\]"):
        plan_repair(_plan(), {0, 3, 4}, "abort")  # rank 1 gets spare 4, rank 2 has none


def test_plan_respawn_policy_gives_new_ids_and_adopts_unknown_processes():
    from dpmpi.resilient import Plan, plan_repair

    new, failed, filled, renumber = plan_repair(Plan(0, (0, 1, 2, 3), (4,), 5), {0, 3}, "respawn")
    assert filled == {1: "respawn:5", 2: "respawn:6"}
    assert new.actives == (0, 5, 6, 3) and new.spares == () and new.next_wid == 7
    assert renumber == {0: 0, 1: 1, 2: 2, 3: 3}
    # a process spawned by an attempt that did not commit (id 5) is alive but unknown: a spare now
    again, _f, filled2, _r = plan_repair(Plan(0, (0, 1, 2, 3), (4,), 5), {0, 2, 3, 5}, "respawn")
    assert filled2 == {1: "spare:5"} and again.actives == (0, 5, 2, 3) and again.next_wid == 6


def test_a_transient_mpirun_startup_failure_is_launched_again(tmp_path):
    """mpirun sometimes fails before starting anything ("The PMIx server's listener thread failed to
    start"): dpmpi-run launches it again, and the program runs once."""
    count = tmp_path / "count"
    fake = tmp_path / "mpirun"
    fake.write_text(
        "#!/bin/sh\n"
        f"n=$(cat {count} 2>/dev/null || echo 0); echo $((n + 1)) > {count}\n"
        "if [ \"$n\" = 0 ]; then\n"
        "  echo \"The PMIx server's listener thread failed to start. We cannot\" >&2; exit 1\n"
        "fi\n"
        "echo ran\n")
    fake.chmod(0o755)
    env = dict(os.environ, DPMPI_MPIRUN=str(fake))
    proc = subprocess.run([sys.executable, "-m", "dpmpi.run", "-n", "1", "--", "hostname"], capture_output=True,
                          text=True, cwd="/", env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["ran"] and count.read_text().strip() == "2"
    assert "launching again, attempt 2 of 3" in proc.stderr
