"""The chaos harness's pure logic (dpmpi/bench/chaos_logic.py): process-tree parsing, kill plans, digests and
verdicts. No MPI, no processes started."""
import json

import pytest

from dpmpi.bench import chaos
from dpmpi.bench.chaos import Proc


# ---- /proc parsing -------------------------------------------------------------------------------
def test_parse_stat_takes_the_fields_after_the_last_parenthesis():
    assert chaos.parse_stat("4242 (python) S 4200 4100 4000 0 -1 4194560 ...") == (4242, 4200, 4000)
    # a command name with spaces and parentheses
    assert chaos.parse_stat("77 (a (b) c) R 1 77 77 34816 77 0") == (77, 1, 77)


def test_parse_environ():
    raw = b"OMPI_COMM_WORLD_RANK=3\0PATH=/bin:/usr/bin\0X=a=b\0\0"
    assert chaos.parse_environ(raw) == {"OMPI_COMM_WORLD_RANK": "3", "PATH": "/bin:/usr/bin", "X": "a=b"}


def rank(pid, ppid, r, sid=100, **extra):
    return Proc(pid, ppid, sid, {"OMPI_COMM_WORLD_RANK": str(r), **extra})


def job_tree():
    """dpmpi-run (100, session leader) -> prterun (101) -> ranks 0..4 (102..106)."""
    procs = {
        1: Proc(1, 0, 1),
        100: Proc(100, 1, 100, {"DPMPI_SPARES": "1"}),
        101: Proc(101, 100, 100, {"DPMPI_SPARES": "1"}),
        **{102 + r: rank(102 + r, 101, r) for r in range(5)},
    }
    return procs


def test_parse_proc_tree_maps_world_ranks_to_pids():
    tree = chaos.parse_proc_tree(job_tree(), 100)
    assert tree.world == {0: 102, 1: 103, 2: 104, 3: 105, 4: 106}
    assert tree.spawned == {} and tree.others == [101]


def test_parse_proc_tree_leaves_out_other_jobs_and_forked_children():
    procs = job_tree()
    procs[200] = Proc(200, 1, 200)  # another engineer's dpmpi-run ...
    procs[201] = rank(201, 200, 0, sid=200)  # ... and its rank 0
    procs[50] = rank(50, 102, 0)  # a process that rank 0 forked (it inherits the variable; pids wrap)
    tree = chaos.parse_proc_tree(procs, 100)
    assert tree.world[0] == 102 and 201 not in tree.world.values() and 50 not in tree.world.values()


def test_parse_proc_tree_keeps_a_reparented_rank_by_its_session():
    procs = job_tree()
    procs[105] = rank(105, 1, 3)  # prterun's child re-parented to init: still in the session
    assert chaos.parse_proc_tree(procs, 100).world[3] == 105
    procs[105] = rank(105, 1, 3, sid=999)  # neither below nor in the session: not ours
    assert 3 not in chaos.parse_proc_tree(procs, 100).world


def test_parse_proc_tree_finds_respawned_processes():
    procs = job_tree()
    procs[400] = rank(400, 101, 0, DPMPI_SPAWNED="1")  # policy "respawn": rank 0 of a spawned job
    tree = chaos.parse_proc_tree(procs, 100)
    assert tree.spawned == {400: 0} and tree.world[0] == 102


def test_read_procs_from_a_fake_proc_directory(tmp_path):
    def add(pid, ppid, sid, env=None):
        d = tmp_path / str(pid)
        d.mkdir()
        (d / "stat").write_text(f"{pid} (python3) S {ppid} {pid} {sid} 0 -1 0")
        (d / "environ").write_bytes(b"".join(f"{k}={v}\0".encode() for k, v in (env or {}).items()))

    add(1, 0, 1)
    add(100, 1, 100)
    add(101, 100, 100)
    add(102, 101, 100, {"OMPI_COMM_WORLD_RANK": "0"})
    add(103, 101, 100, {"OMPI_COMM_WORLD_RANK": "1"})
    add(500, 1, 500, {"OMPI_COMM_WORLD_RANK": "0"})  # not ours: its environment is not even read
    (tmp_path / "self").mkdir()
    procs = chaos.read_procs(100, str(tmp_path))
    assert procs[500].env == {} and procs[102].env == {"OMPI_COMM_WORLD_RANK": "0"}
    assert chaos.parse_proc_tree(procs, 100).world == {0: 102, 1: 103}
    # with a cache, each environment is read once, and a pid that is gone is forgotten
    envs = {}
    chaos.read_procs(100, str(tmp_path), envs)
    assert envs[103] == {"OMPI_COMM_WORLD_RANK": "1"} and 500 not in envs
    assert 101 not in envs  # not a rank (yet): read again next time, it may be a child before its exec
    (tmp_path / "103" / "environ").write_bytes(b"OMPI_COMM_WORLD_RANK=7\0")
    assert chaos.read_procs(100, str(tmp_path), envs)[103].env == {"OMPI_COMM_WORLD_RANK": "1"}
    for name in ("stat", "environ"):
        (tmp_path / "103" / name).unlink()
    (tmp_path / "103").rmdir()
    chaos.read_procs(100, str(tmp_path), envs)
    assert 103 not in envs


# ---- plans -------------------------------------------------------------------------------------
def test_plans_are_a_function_of_the_seed():
    a = chaos.plan_run(7, 3, ["KILL", "TERM"], 4, 3, 2.5)
    assert a == chaos.plan_run(7, 3, ["KILL", "TERM"], 4, 3, 2.5)
    assert a != chaos.plan_run(8, 3, ["KILL", "TERM"], 4, 3, 2.5)
    assert chaos.run_seed(1, "mlp", 2, 0) == chaos.run_seed(1, "mlp", 2, 0) != chaos.run_seed(1, "mlp", 2, 1)


@pytest.mark.parametrize("kills", [1, 2, 3])
def test_plans_kill_distinct_processes_within_the_run(kills):
    kinds, closes = set(), 0
    for seed in range(300):
        plan = chaos.plan_run(seed, kills, ["KILL", "SEGV"], 4, kills, 3.0)
        assert len(plan) == kills
        assert len({k.world_rank for k in plan}) == kills  # nobody is killed twice
        assert all(0 < k.t <= 0.9 * 3.0 for k in plan) and plan == sorted(plan, key=lambda k: k.t)
        for k in plan:
            kinds.add(k.target)
            if k.target == "spare":
                assert k.world_rank >= 4 and k.logical is None
            if k.target == "active":
                assert k.world_rank == k.logical < 4
            if k.target == "replacement":
                # the spare that took the place of an earlier active victim, killed after its repair
                first = next(p for p in plan if p.logical == k.logical and p.target == "active")
                assert k.world_rank >= 4 and k.t >= first.t + 0.25 * 3.0 - 1e-3
            if k.close:
                closes += 1
                before = max(p.t for p in plan if p.t <= k.t and p is not k)
                assert 0 <= k.t - before <= 0.05 + 1e-9
    expected = {"active", "spare"} | ({"replacement"} if kills > 1 else set())
    assert kinds == expected
    assert (closes > 0) == (kills > 1)


def test_replacements_follow_dpmpi_s_order():
    # failed logical ranks get the idle spares in world-rank order: two active victims in turn
    # are replaced by spares 4 then 5, and a "replacement" victim is one of those
    for seed in range(200):
        plan = chaos.plan_run(seed, 3, ["KILL"], 4, 3, 2.0)
        holders = {}
        idle = [4, 5, 6]
        for k in plan:
            if k.target == "spare":
                idle.remove(k.world_rank)
            else:
                if k.target == "replacement":
                    assert holders[k.logical] == k.world_rank
                holders[k.logical] = idle.pop(0)


# ---- digests -----------------------------------------------------------------------------------
def finals(*pairs, step=10):
    return "\n".join(json.dumps({"event": "final", "rank": r, "step": step, "digest": d}) for r, d in pairs)


def test_final_digests_need_every_active_rank_at_the_last_step():
    out = "noise\n" + finals((1, "b"), (0, "a")) + '\n{"event": "step", "rank": 0}\n{broken'
    assert chaos.final_digests(out, 2, 10) == {0: "a", 1: "b"}
    assert chaos.final_digests(out, 3, 10) is None  # rank 2 missing
    assert chaos.final_digests(finals((0, "a"), (1, "b"), step=9), 2, 10) is None  # stopped early
    assert chaos.job_digest({0: "a", 1: "b"}) == chaos.job_digest({1: "b", 0: "a"}) != chaos.job_digest({0: "b", 1: "a"})
    assert chaos.job_digest(None) is None


# ---- verdicts ----------------------------------------------------------------------------------
SEGV_REPORT = """[vm:04242] *** Process received signal ***
[vm:04242] Signal: Segmentation fault (11)
[vm:04242] Signal code: Address not mapped (1)
[vm:04242] *** End of error message ***
"""
victim = {"world_rank": 2, "pid": 4242, "signal": "SEGV", "spawned": False}


def V(rc=0, timed_out=False, digest="d", expected="d", stderr="", victims=(), n=5):
    return chaos.verdict(rc, timed_out, digest, expected, stderr, list(victims), n)


def test_verdict_ok_and_precedence():
    assert V() == "ok"
    assert V(timed_out=True, rc=None) == "hang"
    assert V(timed_out=True, rc=1, digest=None) == "hang"  # a hang beats everything
    assert V(rc=1) == "crash"
    assert V(rc=1, digest=None) == "crash"  # a crash beats a missing digest
    assert V(rc=-9) == "crash"
    assert V(digest="x") == "wrong"
    assert V(digest=None) == "wrong"
    assert V(expected=None) == "wrong"
    assert V(digest="x", stderr=SEGV_REPORT) == "wrong"  # wrong beats dirty


def test_a_victim_s_own_signal_report_is_not_dirty():
    assert V(stderr=SEGV_REPORT, victims=[victim]) == "ok"
    assert V(stderr=SEGV_REPORT) == "dirty-exit"  # the same report from a process we did not kill
    other = SEGV_REPORT.replace("04242", "04243")
    assert V(stderr=other, victims=[victim]) == "dirty-exit"
    reasons = chaos.dirty_reasons(SEGV_REPORT + other, [], 5)
    assert "stderr: Signal: Segmentation fault (11) (x2 processes)" in reasons


@pytest.mark.parametrize("line", [
    "[vm:00001] OPAL ERROR: Unreachable in file ../ompi/mpi/c/comm_free.c at line 54",
    "Segmentation fault (core dumped)",
    "*** An error occurred in MPI_Allreduce ... MPI_ERRORS_ARE_FATAL (processes in this communicator will now abort)",
    "Signal code: Address not mapped (1)",
    "prterun noticed that process rank 3 with PID 0 on node vm exited on signal 11",
    "dpmpi: MPI_Finalize did not return in time; ending the process without it",
])
def test_dirty_patterns(line):
    assert V(stderr="harmless\n" + line + "\n") == "dirty-exit"


def test_harmless_stderr_is_ok():
    err = ("[dpmpi-fault] {\"signal\": 9}\n"  # dpmpi's own fault line
           "NBC_Progress: an error 75 was found during schedule 0x1 at round 0\n"
           "dpmpi-run: rank 2 died (no status: killed by a signal); the other 4 rank(s) recovered and completed; exit code 0\n")
    assert V(stderr=err, victims=[victim]) == "ok"


def test_the_account_must_name_only_victims():
    account = "dpmpi-run: rank {} died (no status: killed by a signal); the other 4 rank(s) recovered and completed; exit code 0\n"
    assert V(stderr=account.format(2), victims=[victim]) == "ok"
    assert V(stderr=account.format(3), victims=[victim]) == "dirty-exit"
    assert chaos.dirty_reasons(account.format(3), [victim], 5) == ["rank 3 died by a signal and was not a victim"]
    failed = "dpmpi-run: rank 1 failed (status 3, uncaught ValueError); the other 4 rank(s) recovered and completed; exit code 0\n"
    assert V(stderr=failed, victims=[victim]) == "dirty-exit"
    # a respawned victim's record names its job-wide id (>= the processes launched)
    spawned = {"world_rank": 0, "pid": 900, "signal": "KILL", "spawned": True}
    assert V(stderr=account.format(5), victims=[spawned]) == "ok"
    assert V(stderr=account.format(5), victims=[victim]) == "dirty-exit"


def test_summary_table_counts_every_verdict():
    rows = [{"config": "mlp k=1", "verdict": v} for v in ("ok", "ok", "hang")] + [{"config": "jacobi k=2", "verdict": "crash"}]
    table = chaos.summary_table(rows).splitlines()
    assert table[0].split() == ["configuration", *chaos.VERDICTS, "runs"]
    assert table[2].split() == ["mlp", "k=1", "2", "0", "1", "0", "0", "0", "3"]
    assert table[3].split() == ["jacobi", "k=2", "0", "0", "0", "1", "0", "0", "1"]


def test_a_kill_after_the_victims_final_line_is_a_late_kill_not_a_crash():
    out = "\n".join(json.dumps(e) for e in [
        {"event": "final", "rank": 0, "wid": 0, "time": 100.0, "digest": "a"},
        {"event": "final", "rank": 1, "wid": 4, "time": 100.5, "digest": "b"}])
    account = "dpmpi-run: rank 4 died (no status: killed by a signal); no rank that completed repaired around it; exit code 1"
    late = [{"world_rank": 4, "pid": 9, "sent": True, "wall": 100.6}]
    early = [{"world_rank": 4, "pid": 9, "sent": True, "wall": 100.4}]
    assert chaos.late_victims(out, late) == {4} and chaos.late_victims(out, early) == set()
    assert chaos.verdict(1, False, "d", "d", account, late, 6, out) == "late-kill"
    assert chaos.verdict(1, False, "d", "d", account, early, 6, out) == "crash"  # killed before its end
    assert chaos.verdict(1, False, "x", "d", account, late, 6, out) == "crash"  # and the results must be right
    other = account.replace("rank 4 died", "rank 2 died")
    assert chaos.verdict(1, False, "d", "d", other, late, 6, out) == "crash"  # another rank was lost



def test_a_kill_after_every_other_ranks_final_line_is_a_late_kill_if_their_results_are_right():
    """Seen in chaos (jacobi-prim, 4+3, three kills): rank 2 was killed as it finished its last
    restore, after ranks 0, 1 and 3 had printed their results; none of them was left in the
    program to repair around it, and dpmpi-run exited 1. Its own result is missing."""
    want = {0: "a", 1: "b", 2: "c", 3: "d"}
    out = "\n".join(json.dumps(e) for e in [
        {"event": "final", "rank": 0, "wid": 0, "time": 100.0, "digest": "a"},
        {"event": "final", "rank": 1, "wid": 1, "time": 100.2, "digest": "b"},
        {"event": "final", "rank": 3, "wid": 5, "time": 100.5, "digest": "d"}])
    account = "dpmpi-run: rank 2 died (no status: killed by a signal); no rank that completed repaired around it; exit code 1"
    after = [{"world_rank": 3, "pid": 8, "sent": True, "wall": 99.0}, {"world_rank": 2, "pid": 9, "sent": True, "wall": 100.6}]
    before = [dict(after[0]), dict(after[1], wall=100.4)]  # rank 3 was still in the program: a failed recovery
    assert chaos.ended_victims(out, after, want) == {2} and chaos.ended_victims(out, before, want) == set()
    assert chaos.verdict(1, False, None, "j", account, after, 7, out, want) == "late-kill"
    assert chaos.verdict(1, False, None, "j", account, before, 7, out, want) == "crash"
    assert chaos.verdict(1, False, None, "j", account, after, 7, out) == "crash"  # (no per-rank reference)
    wrong = dict(want)
    wrong[3] = "x"  # a printed result that is not the failure-free one
    assert chaos.verdict(1, False, None, "j", account, after, 7, out, wrong) == "crash"
    two = out.replace('{"event": "final", "rank": 1, "wid": 1, "time": 100.2, "digest": "b"}\n', "")
    assert chaos.ended_victims(two, after, want) == set()  # rank 1's result is missing too, and no victim's
    other = account.replace("rank 2 died", "rank 1 died")
    assert chaos.verdict(1, False, None, "j", other, after, 7, out, want) == "crash"  # the lost rank was no victim
