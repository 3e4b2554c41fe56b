"""Tier 1: pure logic, no MPI initialised (fault plans, launcher arguments, exit codes)."""
import os
import shutil
import subprocess
import sys
import time

import pytest

from dpmpi import faults, run
from dpmpi.resilient import Filled
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
    # +SECONDS: fail that long after the point is reached (inside a step that begins there)
    assert faults.parse("2:step@20+0.05:KILL") == [Fault(2, "step", Kind.KILL, 20, 0.05)]
    assert faults.parse(Fault(2, "step", Kind.KILL, 20, 0.05).spec()) == [Fault(2, "step", Kind.KILL, 20, 0.05)]


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
        ("2:step@3+soon:KILL", "not a number of seconds"),
        ("2:step@3+-1:KILL", "seconds >= 0"),
        ("2:time@1+1:KILL", "SECONDS' is for the other points"),
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


def test_a_runtime_reaches_point_step_itself_and_the_programs_own_step_points_are_not_counted_twice(monkeypatch):
    """DPMPI_FAULTS=RANK:step@N faulted only programs that called dpmpi.faults.point("step")
    themselves (the README's example does): in a stranger's Runtime program it never fired, and
    nothing said so."""
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    try:
        faults.plan("1:step@3:EXCEPTION,1:nowhere@1:KILL")
        faults.runtime_step()
        faults.point("step")  # (a program that marks its steps too, as the examples did)
        faults.runtime_step()
        assert [f.point for f in faults.unfired()] == ["step", "nowhere"]
        with pytest.raises(InjectedFault, match="rank 1 at step@3"):
            faults.runtime_step()
        assert faults.unfired() == [Fault(1, "nowhere", Kind.KILL, 1)]  # reported at exit
        faults.plan("1:step@2:EXCEPTION")  # a new plan counts afresh, the program's points too
        faults.point("step")
        with pytest.raises(InjectedFault):
            faults.point("step")
    finally:
        faults.clear()


def test_the_runtime_refuses_a_step_that_binds_a_state_name_to_a_new_array():
    """A stranger's step did `w = w - lr * g`: the Runtime kept snapshotting the first array, and
    a recovery ended with results that differ from a failure-free run's, silently."""
    import numpy as np

    from dpmpi.aliases import Aliases

    ns = {"w": np.zeros(4), "m": np.ones(2), "n": 3}
    aliases = Aliases(ns, {"w": ns["w"], "m": ns["m"]})
    ns["w"] -= 1.0  # in place: fine
    ns["n"] = 4
    aliases.check(0)
    ns["w"] = ns["w"] - 1.0
    with pytest.raises(RuntimeError, match="step 5 bound the global 'w' to a new array.*state 'w'"):
        aliases.check(5)
    ping = {"a": np.zeros(2), "b": np.zeros(2)}  # double buffers swapped by name
    ns = {"cur": ping["a"], "nxt": ping["b"]}
    aliases = Aliases(ns, ping)
    ns["cur"], ns["nxt"] = ns["nxt"], ns["cur"]
    with pytest.raises(RuntimeError, match="bound the global '(cur|nxt)' to the array registered as state"):
        aliases.check(2)
    weights = {"params": np.zeros(3)}
    aliases = Aliases({}, weights)
    weights["params"] = weights["params"] * 2
    with pytest.raises(RuntimeError, match="the entry 'params' of the state dict"):
        aliases.check(1)

    def make_step():
        v = np.zeros(3)

        def step(k):
            nonlocal v
            v = v + k
        return step, v

    step, v = make_step()
    aliases = Aliases({}, {"v": v})
    aliases.watch_step(step)
    step(0)
    with pytest.raises(RuntimeError, match="the variable 'v'"):
        aliases.check(0)


def test_the_runtime_refuses_a_step_that_rebinds_an_attribute_or_item_holding_the_state():
    """A stranger's class-based model (bench/strangers/attr_model.py) did `self.w = self.w - lr *
    self.m` in a method given to rt.run: a recovered run ended with other digests, exit code 0."""
    import numpy as np

    from dpmpi.aliases import Aliases

    class Model:
        def __init__(self):
            self.w, self.m, self.lr = np.zeros(4), np.zeros(4), 0.1

        def step(self, k):
            self.m += 1.0  # in place: fine
            self.lr = 0.2  # not state: fine
            if k == 3:
                self.w = self.w - self.lr * self.m

    model = Model()
    aliases = Aliases({}, {"w": model.w, "m": model.m})  # (no global holds it: the bound method does)
    aliases.watch_step(model.step)
    for k in range(3):
        model.step(k)
        aliases.check(k)
    model.step(3)
    with pytest.raises(RuntimeError, match="step 3 bound the attribute 'self.w' to a new array.*state 'w'"):
        aliases.check(3)
    params = [np.zeros(2), np.zeros(3)]  # a module-level list, and a dict inside a global object
    holder = type("Holder", (), {})()
    holder.opt = {"v": np.zeros(2)}
    ns = {"params": params, "holder": holder, "big": [np.zeros(1)] * 5000}
    p0 = params[0]
    aliases = Aliases(ns, {"p0": p0, "p1": params[1], "v": holder.opt["v"], "b": ns["big"][0]})
    params[1] *= 2.0
    aliases.check(0)
    params[0] = params[0] + 1.0
    with pytest.raises(RuntimeError, match="the item 'params\\[0\\]'"):
        aliases.check(1)
    params[0] = p0
    holder.opt = {"v": holder.opt["v"]}  # (a new dict holding the same array: fine)
    aliases.check(2)
    ns["big"][0] = np.ones(1)  # (a list of more than 4096 items is not looked into)
    aliases.check(3)
    layers = [Model(), Model()]  # deeper: a list of layer objects, a layer replaced on the way

    def train(k):
        for layer in layers:
            layer.w -= 0.1
        if k == 1:
            layers[1].m = layers[1].m * 2
        if k == 2:
            layers[0] = Model()
    registered = {f"{n}{i}": getattr(layer, n) for i, layer in enumerate(layers) for n in "wm"}
    aliases = Aliases({}, registered)
    aliases.watch_step(train)
    train(0)
    aliases.check(0)
    train(1)
    with pytest.raises(RuntimeError, match="the attribute 'layers\\[1\\].m' to a new array"):
        aliases.check(1)
    layers[1].m = registered["m1"]
    train(2)
    with pytest.raises(RuntimeError, match="the attribute 'layers\\[0\\].(w|m)' to a new array"):
        aliases.check(2)
    model = Model()  # swapped by attribute: refused like names
    aliases = Aliases({"model": model}, {"w": model.w, "m": model.m})
    model.w, model.m = model.m, model.w
    with pytest.raises(RuntimeError, match="bound the attribute 'model.(w|m)' to the array registered as state"):
        aliases.check(4)


def test_the_runtime_warns_once_when_the_state_it_snapshots_never_changes():
    """What no watched name shows (a holder deeper than watched, a copy): the snapshots' checksum
    stays the same from the first while the steps run; a warning says so, once. A state that
    changed and then stops changing (a converged solver: a stranger's program warned, again and
    again) and a replacement's state are not judged."""
    import warnings

    import numpy as np

    from dpmpi.aliases import UNCHANGED_WARN, Aliases

    aliases = Aliases({}, {"w": np.zeros(2)})
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        aliases.committed(4, {4: 9}, 2)  # (the one before is not held: not counted)
        for e in range(1, UNCHANGED_WARN):
            aliases.committed(4 + 2 * e, {4 + 2 * e: 9, 2 + 2 * e: 9}, 2)
        assert not seen
        aliases.committed(10, {10: 9, 8: 9}, 2)
        assert len(seen) == 1 and "did not change from epoch 4 to epoch 10" in str(seen[0].message)
        aliases.committed(12, {12: 9, 10: 9}, 2)  # (once)
        aliases.committed(14, {14: 3, 12: 9}, 2)
        for e in range(8, 8 + 2 * UNCHANGED_WARN):
            aliases.committed(2 * e, {2 * e: 3, 2 * e - 2: 3}, 2)
        assert len(seen) == 1
    # (the last: a rank with no rows of an uneven decomposition: its state is empty, it cannot change;
    # warned before the fifty-second session)
    for judge, history, w in ((True, [5, 7] + [7] * 2 * UNCHANGED_WARN, np.zeros(2)),
                              (False, [7] * 2 * UNCHANGED_WARN, np.zeros(2)),
                              (True, [7] * 2 * UNCHANGED_WARN, np.zeros((0, 3)))):
        aliases = Aliases({}, {"w": w, "b": bytearray()}, judge_unchanged=judge)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            for e in range(1, len(history)):  # changed once, then converged / a replacement's
                aliases.committed(e, {e: history[e], e - 1: history[e - 1]}, 1)
            assert not seen


def test_a_delayed_fault_fires_after_its_point(monkeypatch):
    import threading

    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    try:
        faults.plan("1:step@1+0.05:EXCEPTION")
        faults.point("step")  # reached: nothing happens yet
        with pytest.raises(InjectedFault, match="rank 1 at step@1"):
            threading.Event().wait(10)  # the fault's thread interrupts this wait in the main thread
    finally:
        faults.clear()


def test_load_env_names_the_variable(monkeypatch):
    monkeypatch.setenv("DPMPI_FAULTS", "2:oops")
    with pytest.raises(ValueError, match="DPMPI_FAULTS='2:oops'"):
        faults.load_env()


# ---- launcher --------------------------------------------------------------------------------
def test_orphaned_shared_memory_segments_are_the_unmapped_ones_of_this_job():
    from dpmpi import shmclean

    files = [("/dev/shm/sm_segment.vm.0.1.0", 100.0), ("/dev/shm/sm_segment.vm.0.1.1", 100.0),
             ("/dev/shm/sm_segment.vm.0.2.0", 50.0), ("/dev/shm/other", 100.0),
             ("/dev/shm/sm_segment.vm.0.3.0", 119.5), ("/dev/shm/osc_sm.vm.12420001.0.10", 100.0),
             ("/dev/shm/osc_sm.vm.12420001.0.11", 100.0)]
    mapped = {"/dev/shm/sm_segment.vm.0.1.1", "/dev/shm/osc_sm.vm.12420001.0.11"}
    # made before the job, mapped by a live process, not Open MPI's, or too fresh: left alone
    assert shmclean.orphans(files, mapped, since=90.0, now=120.0) == [
        "/dev/shm/sm_segment.vm.0.1.0", "/dev/shm/osc_sm.vm.12420001.0.10"]  # (a window's backing file too)


def test_orphaned_segments_are_removed_and_mapped_ones_kept(tmp_path, monkeypatch):
    import mmap
    import time

    from dpmpi import shmclean

    monkeypatch.setattr(shmclean, "MIN_AGE", 0.0)
    dead, live = tmp_path / "sm_segment.vm.0.7.0", tmp_path / "sm_segment.vm.0.7.1"
    window, open_window = tmp_path / "osc_sm.vm.70001.0.6", tmp_path / "osc_sm.vm.70001.0.7"
    for path in (dead, live, window, open_window):
        path.write_bytes(b"x" * 4096)
    with open(live, "r+b") as f, open(open_window, "r+b") as g:
        m, n = mmap.mmap(f.fileno(), 4096), mmap.mmap(g.fileno(), 4096)  # a live process (this one) maps them
        try:
            assert shmclean.remove_orphans(time.time() - 60, str(tmp_path)) == 2
            assert not dead.exists() and not window.exists() and live.exists() and open_window.exists()
        finally:
            m.close()
            n.close()


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
    # every rank gets the C exit guard, mpirun itself does not (it is not in env)
    preload = next(a for a in cmd if a.startswith("LD_PRELOAD="))
    assert cmd[cmd.index(preload) - 1] == "-x" and preload.split("=", 1)[1].endswith("libdpmpi_guard.so")
    assert "LD_PRELOAD" not in env
    # Open MPI's hierarchical collectives, not fault tolerant, are left out
    assert cmd[cmd.index("coll") - 1 : cmd.index("coll") + 2] == ["--mca", "coll", "^han"]
    # nor the TCP transport's emulated put, which deadlocks a process when a peer dies during one
    at = cmd.index("btl_tcp_flags")
    assert cmd[at - 1] == "--mca" and "put" not in cmd[at + 1].split(",") and "send" in cmd[at + 1].split(",")
    # the user's own btl and coll choices and host list win, on the command line or in the environment
    cmd = run.build(run.parse_args(["-n", "8", "--mca", "btl", "tcp,self", "--mca", "coll", "^adapt", "--host", "a:8",
                                    "--", "p"]), "m", {})
    assert "^ofi" not in cmd and "^han" not in cmd and "--oversubscribe" not in cmd
    cmd = run.build(run.parse_args(["-n", "2", "--", "p"]), "m", {"OMPI_MCA_coll": "tuned,basic,self,libnbc"})
    assert "coll" not in cmd and "^ofi" in cmd


def test_spares_beyond_the_cores_keep_the_active_ranks_bound(monkeypatch):
    # 2 cores, 2 active + 1 spare: plain --oversubscribe made mpirun bind nothing, and an MLP
    # step ran 16x slower with the idle spare; the active ranks get a core each instead
    monkeypatch.setattr(run.os, "cpu_count", lambda: 2)
    cmd = run.build(run.parse_args(["-n", "3", "--spares", "1", "--", "p"]), "m", {})
    assert "--oversubscribe" not in cmd
    assert cmd[cmd.index("--map-by") + 1] == "core:OVERSUBSCRIBE"
    assert cmd[cmd.index("--bind-to") + 1] == "core:overload-allowed"
    assert cmd[cmd.index("--rank-by") + 1] == "slot"  # rank i on core i (checked with taskset)
    # more active ranks than cores: nothing to bind to
    cmd = run.build(run.parse_args(["-n", "4", "--spares", "1", "--", "p"]), "m", {})
    assert "--oversubscribe" in cmd and "--bind-to" not in cmd
    # the user's own binding wins
    cmd = run.build(run.parse_args(["-n", "3", "--spares", "1", "--bind-to", "none", "--", "p"]), "m", {})
    assert cmd.count("--bind-to") == 1 and "--map-by" not in cmd


@pytest.mark.parametrize("n, spares, cores", [(1, 0, 2), (2, 0, 2), (2, 0, 64), (4, 0, 64), (5, 1, 64), (3, 1, 2)])
def test_every_launch_leaves_room_for_spawn(monkeypatch, n, spares, cores):
    # N <= cores: without OVERSUBSCRIBE, Comm.Spawn failed ("All nodes which are allocated for
    # this job are already filled"); mapping and binding by core keep mpirun's default binding
    monkeypatch.setattr(run.os, "cpu_count", lambda: cores)
    cmd = run.build(run.parse_args(["-n", str(n), "--spares", str(spares), "--", "p"]), "m", {})
    at = cmd.index("--map-by")
    assert cmd[at : at + 6] == ["--map-by", "core:OVERSUBSCRIBE", "--rank-by", "slot",
                                "--bind-to", "core:overload-allowed"]
    assert cmd == run.build(run.parse_args(["-n", str(n), "--spares", str(spares), "--", "p"]), "m", {},
                            spawn_room=True)
    assert "--oversubscribe" not in cmd and cmd.index("--map-by") < cmd.index("-n")
    assert cmd.count("--map-by") == cmd.count("--bind-to") == cmd.count("--rank-by") == 1


def test_spawn_room_false_is_the_earlier_launch(monkeypatch):
    monkeypatch.setattr(run.os, "cpu_count", lambda: 2)
    old = lambda *a: run.build(run.parse_args([*a, "--", "p"]), "m", {}, spawn_room=False)  # noqa: E731
    for cmd in (old("-n", "1"), old("-n", "2")):  # N <= cores: mpirun's defaults, no room for a spawn
        assert not {"--map-by", "--bind-to", "--rank-by", "--oversubscribe"} & set(cmd)
    assert "--oversubscribe" in old("-n", "4")
    spares = old("-n", "3", "--spares", "1")  # only the spares beyond the cores: as now
    assert spares[spares.index("--map-by") + 1] == "core:OVERSUBSCRIBE"


@pytest.mark.parametrize("placement", [["--host", "a:4"], ["-H", "a,b"], ["--hostfile", "h"],
                                       ["--map-by", "slot"], ["--map-by=node"], ["--bind-to", "none"],
                                       ["--oversubscribe"], ["--rank-by", "node"], ["--cpu-set", "0,1"],
                                       ["--default-hostfile", "h"]])
def test_the_users_placement_is_left_alone(monkeypatch, placement):
    monkeypatch.setattr(run.os, "cpu_count", lambda: 2)
    cmd = run.build(run.parse_args(["-n", "2", *placement, "--", "p"]), "m", {})
    added = cmd[: cmd.index("-x")]  # what dpmpi-run adds comes before the forwarded variables
    assert not {"--map-by", "--map-by=node", "--bind-to", "--rank-by", "--oversubscribe"} & set(added)
    assert cmd[cmd.index("-n") - len(placement) : cmd.index("-n")] == placement


def test_a_replacement_takes_the_failed_places_cpus():
    from dpmpi.resilient.plan import Plan, cpus_of_place, inherit_places

    base = Plan(3, (0, 1, 2), (3,), 5)
    places = {0: ("a", (0,)), 1: ("a", (1,)), 2: ("b", (0,)), 3: ("a", (0, 1))}
    before = dict(places)
    # a spare and a respawned process (not known to the parents: assumed on the failed rank's node)
    filled = {1: Filled("spare", 3), 2: Filled("respawn", 5)}
    assert cpus_of_place(places, base, filled, 3) == (1,)
    assert cpus_of_place(places, base, filled, 5) == (0,)
    assert cpus_of_place(places, base, filled, 0) is None  # a survivor keeps its CPUs
    assert cpus_of_place({**places, 5: ("c", (0, 1))}, base, filled, 5) is None  # another node
    assert cpus_of_place(places, base, {1: Filled("dropped", -1)}, 3) is None
    after = inherit_places(places, base, filled)
    assert after[3] == ("a", (1,)) and after[5] == ("b", (0,))  # a later replacement of them gets these
    assert after[0] == ("a", (0,))
    assert places == before  # pure: the argument is left as it was
    other = {1: ("a", (1,)), 3: ("c", (0, 1))}
    # a spare on another node keeps its own
    assert inherit_places(other, base, {1: Filled("spare", 3)})[3] == ("c", (0, 1))
    assert inherit_places(places, base, {1: Filled("dropped", -1)}) == places  # nobody took the place


def test_a_spare_called_in_takes_the_failed_ranks_cpus(monkeypatch):
    from dpmpi.resilient import affinity

    calls = []
    monkeypatch.setattr(affinity.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(affinity.os, "sched_setaffinity", lambda tid, cpus: calls.append((tid, tuple(cpus))))
    affinity.adopt_cpus((1,))
    assert calls and all(cpus == (1,) for _tid, cpus in calls)
    assert os.getpid() in {tid for tid, _c in calls}
    calls.clear()
    affinity.adopt_cpus((0, 1))  # already there
    affinity.adopt_cpus(())  # unknown
    assert not calls


def test_the_snapshot_threads_run_on_the_cpus_no_process_of_the_node_is_bound_to():
    from dpmpi.resilient.affinity import cpu_list, helper_cpus, nearest

    assert cpu_list("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11} and cpu_list("5") == {5} and cpu_list("") == set()
    with pytest.raises(ValueError):
        cpu_list("0-x")
    allowed = set(range(16))
    # 4 ranks and a spare bound one core each on node a, two processes on node b
    places = {p: ("a", (p,)) for p in range(5)} | {5: ("b", (0,)), 6: ("b", (1,))}
    assert helper_cpus(places, "a", allowed) == tuple(range(5, 16))
    assert helper_cpus(places, "b", allowed) == tuple(range(2, 16))
    assert helper_cpus(places, "a", set(range(5))) == ()  # every core of the job's share has a rank
    # an unbound process (its CPUs: the whole share) or unknown CPUs: no helper CPUs
    assert helper_cpus({**places, 7: ("a", tuple(range(16)))}, "a", allowed) == ()
    assert helper_cpus({**places, 7: ("a", ())}, "a", allowed) == ()
    assert helper_cpus(places, "a", set()) == ()  # the launcher's CPUs unknown
    # two sockets: a rank on CPU 1 gets the free CPUs of its own NUMA node, if there are any
    numa = [set(range(8)), set(range(8, 16))]
    assert nearest(tuple(range(5, 16)), numa, (1,)) == (5, 6, 7)
    assert nearest(tuple(range(5, 16)), numa, (9,)) == tuple(range(8, 16))
    assert nearest((12, 13), numa, (1,)) == (12, 13)  # none near: the far ones
    assert nearest((5, 6), [], (1,)) == (5, 6)  # topology unknown


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
        # the same uncaught error ended rank 1 and its replacement (world rank 4): a program error, not
        # a recovered fault (was 0: the job went on without them)
        (5, {0: ok(0, [1, 4]), 2: ok(2, [1, 4]), 3: ok(3, [1, 4]), 1: bad(1, 1, "uncaught ValueError: bug at 50"),
             4: bad(4, 1, "uncaught ValueError: bug at 50")}, 0, 1),
        (5, {0: ok(0, [1, 4]), 2: ok(2, [1, 4]), 3: ok(3, [1, 4]), 1: bad(1, 1, "uncaught OSError: disk"),
             4: bad(4, 1, "uncaught ValueError: bug at 50")}, 0, 0),  # two different errors, recovered
        # ranks 1 and 3 ended by a peer's death that their program did not handle (a setup's Sendrecv),
        # each knowing other failed ranks when it raised: still the same error (was 0 or 1 by the lists)
        (5, {0: ok(0, [1, 2, 3]), 4: ok(4, [1, 2, 3]),
             **{r: bad(r, 1, f"uncaught ProcFailedError: a peer process failed in Sendrecv (failed ranks known "
                             f"here: {known})") for r, known in ((1, [2]), (3, [1, 2]))}}, 0, 1),
        (5, {0: ok(0, [1, 4]), 2: ok(2, [1, 4]), 3: ok(3, [1, 4]), 1: bad(1, 3, "sys.exit(3)"),
             4: bad(4, 3, "sys.exit(3)")}, 0, 0),  # (only uncaught errors count as the program's)
        # rank 1 killed; ranks 0, 3 and the spare (4) left out of the repair by a split Shrink and ended
        # by the repair deadline; rank 2 went on alone (was 0: "recovered and completed")
        (5, {2: ok(2, [0, 1, 3, 4]), **{r: bad(r, 1, "Respawn did not complete within 60 s (DPMPI_REPAIR_TIMEOUT); "
                                            "a further failure left it stuck") for r in (0, 3, 4)}}, 0, 1),
    ],
)
def test_job_exit_code(n, records, mpirun_rc, expected):
    # n is the job's size: a rank below n without a record died by a signal
    assert run.job_exit_code(n, records, mpirun_rc)[0] == expected


def test_an_account_writes_a_cause_once_and_counts_the_ranks_past_sixteen():
    """Four ranks that raised the same error gave an account of ~1,000 characters (the cause
    four times; 512 ranks: one line of ~100 KB): a cause already given is named by its first rank,
    and past 16 ranks the rest are counted."""
    cause = "uncaught RuntimeError: " + "x" * 200
    records = {r: {"status": 1, "cause": cause} for r in range(4)}
    code, account = run.job_exit_code(4, records, 0)
    assert code == 1 and account.count(cause) == 1, account
    assert account == (f"rank 0 failed (status 1, {cause}); " + "; ".join(
        f"rank {r} failed (status 1, the same cause as rank 0)" for r in (1, 2, 3)) + "; no rank completed")
    records[2] = {"status": 1, "cause": "uncaught ValueError"}
    del records[3]  # (killed by a signal)
    _, account = run.job_exit_code(4, records, 0)
    assert account == (f"rank 0 failed (status 1, {cause}); rank 1 failed (status 1, the same cause as rank 0); "
                       f"rank 2 failed (status 1, uncaught ValueError); rank 3 died (no status: killed by a "
                       f"signal); no rank completed")
    many = {r: {"status": 1, "cause": cause} for r in range(512) if r not in (20, 21, 22, 300)}
    _, account = run.job_exit_code(512, many, 0)
    assert account.count(cause) == 1 and len(account) < 1500, account
    assert account.endswith("; 496 more rank(s) (16-511) failed (4 of them died without a status); no rank "
                            "completed"), account


def test_a_plan_names_the_processes_the_job_went_on_without():
    from dpmpi.resilient.plan import Plan

    assert Plan(0, (0, 1, 2, 3), (4,)).departed() == []
    assert Plan(1, (0, 4, 2, 3), ()).departed() == [1]
    assert Plan(2, (0, 4, 2), ()).departed() == [1, 3]  # (shrunk)
    assert Plan(3, (5, 4, 2, 6), (), next_process_id=8).departed() == [0, 1, 3, 7]  # (7: spawned, died)
    assert Plan(1, (0, 1), (), next_process_id=3).departed() == [2]


def test_a_crash_in_mpi_finalize_after_a_failure_free_program_is_in_the_account_and_the_exit_code():
    """A rank whose MPI_Finalize crashed at its normal exit, after its status 0 was out, in a job
    that knew of no failure: dpmpi-run counted it as completed and said nothing (exit code 0, the
    library's report alone). Its exit guard now writes a record with the signal (dpmpi_fatal.c)."""
    ok = {"status": 0, "recovered": [], "idle_spares": []}
    crash = {"status": 1, "recovered": [], "idle_spares": [], "finalize_crash": 6,
             "cause": "MPI_Finalize crashed (signal 6)"}
    code, account = run.job_exit_code(4, {0: ok, 1: crash, 2: ok, 3: ok}, 0)
    assert code == 134 and account == ("MPI_Finalize crashed in rank 1 (signal 6), with no failure in the job (the "
                                       "MPI library's report above)")
    code, account = run.job_exit_code(4, {0: ok, 1: crash, 2: dict(crash, finalize_crash=11), 3: crash}, 0)
    assert code == 134 and account.startswith("MPI_Finalize crashed in ranks 1-3 (the first: signal 6), with"), account
    code, account = run.job_exit_code(4, {0: ok, 1: crash, 2: {"status": 3, "cause": "os._exit(3)"}, 3: ok}, 0)
    assert code == 3 and account.startswith("rank 2 failed (status 3, os._exit(3)); no rank that completed repaired "
                                            "around it; MPI_Finalize crashed in rank 1 (signal 6)"), account


def test_python_ranks_that_all_died_by_signal_fail_the_job():
    # seen: both ranks segfaulted in MPI, mpirun --with-ft ulfm returned 0, and so did dpmpi-run
    code, account = run.job_exit_code(2, {}, 0, expect_records=True)
    assert code == 1 and "every rank died" in account


def test_a_placement_mpirun_refuses_is_not_called_ranks_killed_by_a_signal():
    # `dpmpi-run -n 1 --map-by core:PE=2`: mpirun maps nothing and ends with 1; the account said
    # "every rank died without a status (killed by a signal)"
    code, account = run.job_exit_code(2, {}, 1, expect_records=True)
    assert code == 1 and "mpirun ended with exit code 1 and no rank left a status" in account
    assert "killed by a signal" not in account
    proc = subprocess.run([sys.executable, "-m", "dpmpi.run", "-n", "1", "--map-by", "core:PE=2", "--", "true"],
                          capture_output=True, text=True, cwd="/", timeout=60)
    assert proc.returncode != 0 and f"mpirun ended with exit code {proc.returncode} and no rank left a " \
        f"status" in proc.stderr, proc.stderr  # (mpirun's own code: 213 here)
    assert "cpus-per-proc" in proc.stderr  # (mpirun's own message, above dpmpi-run's)


def test_a_record_of_a_process_without_mpi_never_replaces_a_rank_record():
    # e.g. `sh -c "prog; true"`: the shell (no MPI) ends after the rank it started
    out = run.Outcome()
    out.add({"rank": 1, "status": 0, "mpi": True})
    out.add({"rank": 1, "status": 7, "mpi": False})
    assert out.records[1]["status"] == 0
    out.add({"rank": 1, "status": 3, "mpi": True})  # a later record of the rank itself wins
    assert out.records[1]["status"] == 3
    out.add({"rank": -1, "status": 9, "mpi": True})  # a spawned process: no rank of the job
    assert set(out.records) == {1}


# ---- hot-swap planning (pure) ------------------------------------------------------------------
def _plan():
    from dpmpi.resilient import Plan

    return Plan(0, (0, 1, 2, 3), (4, 5))


def test_plan_fills_failed_ranks_from_spares_in_order():
    from dpmpi.resilient import plan_repair

    new, failed, filled, renumber = plan_repair(_plan(), {0, 2, 3, 4, 5}, "shrink")
    assert (new.repairs, new.actives, new.spares) == (1, (0, 4, 2, 3), (5,))
    assert failed == [1] and filled == {1: Filled("spare", 4)} and renumber == {0: 0, 1: 1, 2: 2, 3: 3}


def test_plan_skips_dead_spares_and_shrinks_when_they_run_out():
    from dpmpi.resilient import plan_repair
    from dpmpi.resilient.plan import dropped_ranks

    new, failed, filled, renumber = plan_repair(_plan(), {0, 3, 5}, "shrink")
    assert new.actives == (0, 5, 3) and new.spares == ()
    assert filled == {1: Filled("spare", 5), 2: Filled("dropped", -1)} and renumber == {0: 0, 1: 1, 3: 2}
    assert dropped_ranks(filled) == [2] and dropped_ranks({1: Filled("spare", 5)}) == []


def test_plan_abort_policy_raises():
    from dpmpi.resilient import SparesDepletedError, plan_repair

    with pytest.raises(SparesDepletedError, match=r"logical rank\(s\) \[2\]"):
        plan_repair(_plan(), {0, 3, 4}, "abort")  # rank 1 gets spare 4, rank 2 has none


def test_plan_respawn_policy_gives_new_ids_and_adopts_unknown_processes():
    from dpmpi.resilient import Plan, plan_repair

    new, failed, filled, renumber = plan_repair(Plan(0, (0, 1, 2, 3), (4,), 5), {0, 3}, "respawn")
    assert filled == {1: Filled("respawn", 5), 2: Filled("respawn", 6)}
    assert new.actives == (0, 5, 6, 3) and new.spares == () and new.next_process_id == 7
    assert renumber == {0: 0, 1: 1, 2: 2, 3: 3}
    # a process spawned by an attempt that did not commit (id 5) is alive but unknown: a spare now
    again, _f, filled2, _r = plan_repair(Plan(0, (0, 1, 2, 3), (4,), 5), {0, 2, 3, 5}, "respawn")
    assert filled2 == {1: Filled("spare", 5)} and again.actives == (0, 5, 2, 3) and again.next_process_id == 6


def test_plan_names_the_logical_rank_of_a_process():
    from dpmpi.resilient import Plan

    plan = Plan(2, (0, 5, 2), (4,), 6)
    assert [plan.logical(p) for p in (0, 5, 2, 4, 1, 99)] == [0, 1, 2, -1, -1, -1]  # a spare, the dead: -1


def test_an_intercommunicators_recipe_names_its_remote_leader_as_a_logical_rank():
    """``half.Create_intercomm(local_leader, comm, remote_leader, tag)`` is recorded with the remote
    leader as a rank of the active communicator: a shrink renumbers it, or drops it (the
    intercommunicator cannot be made again: None); a bad argument raises before any collective."""
    from dpmpi.resilient import intercomms
    from dpmpi.resilient.plan import Recipe

    assert intercomms.own_args("Create_intercomm", (0, 3, 7), 4) == (0, 3, 7)
    assert intercomms.own_args("Merge", (1,), 4) == (True,)
    with pytest.raises(ValueError, match="remote_leader 4 is not a rank"):
        intercomms.own_args("Create_intercomm", (0, 4, 7), 4)
    with pytest.raises(TypeError, match="tag must be an int"):
        intercomms.own_args("Create_intercomm", (0, 1, "7"), 4)
    inter = Recipe("Create_intercomm", 2, {-1: (0, 3, 7)})
    assert inter.renumbered({0: 0, 1: 1, 3: 2}) == Recipe("Create_intercomm", 2, {-1: (0, 2, 7)})
    assert inter.renumbered({0: 0, 1: 1, 2: 2}).args == {-1: (0, None, 7)}  # its remote leader dropped
    assert Recipe("Merge", 3, {-1: (True,)}).renumbered({0: 0}) == Recipe("Merge", 3, {-1: (True,)})


def test_recipes_follow_the_renumbering_of_a_shrink():
    from dpmpi.resilient.plan import Recipe

    renumber = {0: 0, 1: 1, 3: 2}  # rank 2 dropped, 3 became 2
    split = Recipe("Split", -1, {0: (0, 0), 1: (1, 0), 2: (0, 1), 3: (1, 1)})
    assert split.renumbered(renumber) == Recipe("Split", -1, {0: (0, 0), 1: (1, 0), 2: (1, 1)})
    group = Recipe("Create_group", 0, {-1: ((1, 2, 3), 7)})
    assert group.renumbered(renumber) == Recipe("Create_group", 0, {-1: ((1, 2), 7)})
    dup = Recipe("Dup", 1, {})
    assert dup.renumbered(renumber) == dup and dup.renumbered(renumber) is not dup
    assert split.args[2] == (0, 1)  # the original is left as it was
    same = {0: 0, 1: 1, 2: 2, 3: 3}  # a repair that filled every place: nothing changes
    assert split.renumbered(same) == split and group.renumbered(same) == Recipe("Create_group", 0, {-1: ((1, 2, 3), 7)})
    # a distributed graph (a weighted ring): rank 2's entry goes, and so does rank 2 from its neighbours' lists
    ring = Recipe("Create_dist_graph_adjacent", -1, {r: (((r - 1) % 4,), (10 + r,), ((r + 1) % 4,), None, False)
                                                     for r in range(4)})
    assert ring.renumbered(renumber).args == {0: ((2,), (10,), (1,), None, False), 1: ((0,), (11,), (), None, False),
                                              2: ((), (), (0,), None, False)}
    assert ring.renumbered(same) == ring


def test_graph_recipes_check_and_normalise_their_arguments():
    from mpi4py import MPI

    from dpmpi.resilient import topology

    assert topology.graph_args([2, 4], [1, 0, 0, 1], 0) == ((2, 4), (1, 0, 0, 1), False)
    to_logical = lambda ranks: [r + 10 for r in ranks]  # noqa: E731
    assert topology.dist_args([1], [2, 3], None, MPI.WEIGHTS_EMPTY, MPI.INFO_NULL, True, to_logical) == (
        (11,), None, (12, 13), topology.EMPTY, True)
    assert topology.dist_args([1], [2], MPI.UNWEIGHTED, [5], MPI.INFO_NULL, False, to_logical)[1] is None
    with pytest.raises(ValueError, match="2 sourceweights for 1 neighbours"):
        topology.dist_args([1], [2], [1, 2], None, MPI.INFO_NULL, False, to_logical)
    with pytest.raises(TypeError, match="sources must be a sequence of ints"):
        topology.dist_args(["a"], [2], None, None, MPI.INFO_NULL, False, to_logical)
    info = MPI.Info.Create()
    try:  # an info's hints are recorded, and passed again when the repair makes it
        assert topology.info_items("Dup", info) is None and topology.info_items("Dup", None) is None
        info.Set("mpi_assert_no_any_tag", "true")
        hints = (("mpi_assert_no_any_tag", "true"),)
        assert topology.dist_args([1], [2], None, None, info, False, to_logical) == ((11,), None, (12,), None, False,
                                                                                     hints)
        assert topology.renumbered_dist(((0, 1), None, (1,), None, False, hints), {1: 0}) == (
            (0,), None, (0,), None, False, hints)
        assert topology.with_info(hints, lambda i: i.Get("mpi_assert_no_any_tag")) == "true"
        assert topology.with_info(None, lambda i: i) == MPI.INFO_NULL
        with pytest.raises(TypeError, match="Split_type info must be an MPI.Info"):
            topology.info_items("Split_type", {"a": "b"})
    finally:
        info.Free()


def test_a_repair_remakes_only_the_derived_communicators_still_in_use_and_their_parents():
    from dpmpi.resilient.plan import Recipe, kept_recipes

    setup = Recipe("Split", -1, {0: (0, 0), 1: (1, 1)})
    per_step = [Recipe("Split", -1, {0: (0, 0), 1: (0, 1)}) for _ in range(3)]  # made and freed each step
    child = Recipe("Dup", 2, {})  # made from the second per-step one, which the program freed
    recipes = [setup, *per_step, child]
    kept, old = kept_recipes(recipes, [True, False, False, False, True])
    assert old == [0, 2, 4]  # the freed parent of a child still in use is remade too
    assert kept == [setup, per_step[1], Recipe("Dup", 1, {})]  # the child's parent re-indexed
    assert kept_recipes(recipes, [False] * 5) == ([], [])
    assert kept_recipes(recipes, [True] * 5) == (recipes, [0, 1, 2, 3, 4])
    with pytest.raises(ValueError):
        kept_recipes(recipes, [True])


def test_an_mpirun_that_ignores_the_cancels_sigterm_is_killed_after_a_grace(monkeypatch):
    """dpmpi-run passes a SIGTERM (``timeout``, a scheduler) on to mpirun; a prterun stuck on a
    mutex in PRRTE's event loop never handled it, and dpmpi-run waited for ever (forty-second
    session). Past ``KILL_GRACE`` it is SIGKILLed; one that ended is left alone."""
    import signal

    from dpmpi import cancel

    class Stuck:
        def __init__(self):
            self.calls, self.ended = [], False

        def terminate(self):
            self.calls.append("terminate")

        def kill(self):
            self.calls.append("kill")

        def poll(self):
            return 0 if self.ended else None

    now = [100.0]
    monkeypatch.setattr(cancel.time, "monotonic", lambda: now[0])
    for ends in (False, True):
        proc, c = Stuck(), cancel.Cancel()
        c.watch(proc)
        c.tick()
        c._on_signal(signal.SIGTERM, None)
        now[0] += cancel.KILL_GRACE / 2
        c.tick()
        assert proc.calls == ["terminate"]
        proc.ended = ends
        now[0] += cancel.KILL_GRACE
        c.tick()
        assert proc.calls == (["terminate"] if ends else ["terminate", "kill"]) and c.exit_code() == 143


def test_a_call_whose_agreement_a_repair_cut_short_is_handed_with_its_record_when_it_succeeded():
    """A survivor's prologue call on a derived communicator completed, and the agreement after it
    gave up as a repair began (``between_runs``: ``held``). If that agreement ended well, the
    survivor goes on without making the call again, so the replacement must be handed the call
    with the record (before, it was recorded only after the repair: the replacement made it for
    real while the survivor went on, a hang in tp_setup.py with two ranks killed 0.2 s apart);
    if it failed, the survivor makes it again with the replacement, so it is not handed."""
    from mpi4py import MPI

    from dpmpi.errors import RevokedError
    from dpmpi.resilient import prologue_calls, prologue_derived as pd

    for ended_well in (True, False):
        records = pd.DerivedRecords()
        records.record(4, lambda: (2, 3), "allreduce", (1,), {}, 2, 0)
        assert not pd.DerivedRecords() and records
        at = pd.Where(4, lambda: (2, 3), outcome=lambda: ended_well)
        told = []

        def failed_then_repaired(failure):
            told.append(("repair", [[(e.op, e.payload) for e in o.entries] for o in records.offers(3, {2}, {2})]))

        def agree(flag):
            raise RevokedError("a repair began", MPI.ERR_REVOKED)
        out, again = prologue_calls.between_runs(
            "allreduce", lambda: 7, (3,), {}, agree, failed_then_repaired, lambda: lambda *a: told.append("again") or 7,
            at.outcome, lambda result: records.pend(at, "allreduce", (3,), {}, result, 0))
        handed = told[0][1][0]
        assert out == 7 and [op for op, _p in handed] == ["allreduce"] * (2 if ended_well else 1)
        assert again is (not ended_well) and ("again" in told) is (not ended_well)


def test_a_repair_makes_intercommunicators_and_what_is_made_from_them_after_its_commit():
    """The rest is made inside the attempt, before the commit agreement (remake.py): a death
    there starts the repair again. An intercommunicator's remote group may be made only at its
    replacements' own call, after the repair, so the survivors' side waits for it after the
    commit (before the commit the job hung: the replacements waited in the agreement)."""
    from dpmpi.resilient.plan import Recipe
    from dpmpi.resilient.remake import after_commit

    half = Recipe("Split", -1, {0: (0, 0), 1: (1, 1)})
    inter = Recipe("Create_intercomm", 0, {-1: (0, 1, 7)})
    merged = Recipe("Merge", 1, {-1: (False,)})
    dup_of_merged = Recipe("Dup", 2, {})
    other = Recipe("Dup", -1, {})
    assert after_commit([half, inter, merged, dup_of_merged, other]) == {1, 2, 3}
    assert after_commit([half, other, Recipe("Dup", 0, {})]) == set()
    assert after_commit([]) == set()


def test_a_repair_event_names_the_communicators_it_remade_and_those_this_process_held():
    """The account a repair event gives (``rebuilt``, ``held_here``): enough to see, in the events
    log, that a step's communicator was remade because one process still held it (the rare hang
    of tests/programs/derived_per_step.py, thirty-fifth session)."""
    from dpmpi.resilient.plan import Recipe, rebuilt_account

    setup, kept_dup = Recipe("Split", -1, {0: (0, 0)}), Recipe("Dup", -1, {})
    per_step = Recipe("Split", -1, {0: (0, 0), 1: (1, 1)})
    child = Recipe("Dup", 2, {})  # made from the step's one, which the program freed
    recipes = [setup, kept_dup, per_step, child, per_step]
    # agreed: setup, the kept Dup and the child; this process held setup and the child
    assert rebuilt_account(recipes, [True, True, False, True, False], [True, False, False, True, False]) == {
        "rebuilt": ["Split", "Dup", "Split", "Dup"], "held_here": [0, 3]}  # (the child's parent remade too)
    # a process whose list is longer than the agreed one (the newest recipe dropped: agree_held)
    assert rebuilt_account(recipes, [True, False], [False, True, True, True, True]) == {
        "rebuilt": ["Split"], "held_here": []}
    assert rebuilt_account(recipes, None, []) == {"rebuilt": [], "held_here": []}
    assert rebuilt_account([], [], []) == {"rebuilt": [], "held_here": []}


def test_a_failure_the_runtime_handles_lets_go_of_what_the_steps_closures_held():
    """``holding.let_go_of``: a cleared frame still keeps its function, and so the function's
    closure; only dropping the frames lets go of what a closure of the step's own held (the hang
    of ``derived_per_step.py closure``, thirty-sixth session). ``let_go_of_unwound``, for a failure
    the program handles itself, keeps the program's frames (and so that closure)."""
    import gc
    import traceback
    import weakref

    from dpmpi.resilient import holding

    class Handle:
        pass

    refs = []

    def step():
        sub = Handle()
        refs.append(weakref.ref(sub))

        def pair_sum():
            sub.used = True
            raise RuntimeError("a peer failed")
        pair_sum()

    def fail() -> BaseException:
        try:
            try:
                step()
            except RuntimeError as cause:
                raise ValueError("raised from it") from cause
        except ValueError as exc:
            return exc

    exc = fail()
    traceback.clear_frames(exc.__cause__.__traceback__)  # (what let_go_of_unwound does to them)
    gc.collect()
    assert refs[0]() is not None  # cleared, the frames still hold the closure's function
    assert holding.let_go_of(exc) is exc and exc.__traceback__ is None and exc.__cause__.__traceback__ is None
    gc.collect()
    assert refs[0]() is None


def test_a_replacement_is_handed_a_kept_communicator_only_for_the_call_that_made_it():
    from dpmpi.resilient.plan import replays
    from dpmpi.resilient.plan import Recipe

    kept = Recipe("Dup", -1, {})  # made by a step once and kept
    assert replays(kept, "Dup", -1, 1, None)
    assert not replays(kept, "Split", -1, 1, (1, 1))  # a step's own Split first: made with the survivors
    assert not replays(kept, "Dup", 0, 1, None)  # a Dup of another communicator
    halves = Recipe("Split", -1, {0: (0, 0), 1: (1, 1)})
    assert replays(halves, "Split", -1, 1, (1, 1)) and not replays(halves, "Split", -1, 1, (0, 1))
    group = Recipe("Create_group", -1, {-1: ((0, 2), 5)})
    assert replays(group, "Create_group", -1, 2, ((0, 2), 5)) and not replays(group, "Create_group", -1, 2, ((0, 2), 6))
    node = Recipe("Split_type", -1, {0: (1, 0), 1: (1, 3)})  # (MPI.COMM_TYPE_SHARED, key) by rank
    assert replays(node, "Split_type", -1, 1, (1, 3)) and not replays(node, "Split", -1, 1, (1, 3))
    cart = Recipe("Create_cart", -1, {-1: ((4,), (True,), False)})
    assert replays(cart, "Create_cart", -1, 3, ((4,), (True,), False))
    assert not replays(cart, "Create_cart", -1, 3, ((2, 2), (True, True), False))
    evens = Recipe("Create", -1, {-1: ((0, 2), None)})
    assert replays(evens, "Create", -1, 1, ((0, 2), None)) and not replays(evens, "Create_group", -1, 1, ((0, 2), None))
    assert evens.renumbered({0: 0, 2: 1, 3: 2}).args == {-1: ((0, 1), None)}  # (after a shrink)
    hinted = Recipe("Dup", -1, {-1: (("mpi_assert_no_any_tag", "true"),)})  # Dup(info) / Dup_with_info
    assert replays(hinted, "Dup", -1, 1, hinted.args[-1]) and not replays(hinted, "Dup", -1, 1, None)
    assert not replays(kept, "Dup", -1, 1, hinted.args[-1])
    assert node.renumbered({1: 0}).args == {0: (1, 3)} and cart.renumbered({0: 0}).args == cart.args


def test_a_replacement_gets_how_its_half_made_a_communicator_derived_from_a_derived_one():
    from dpmpi.resilient.plan import UNKNOWN, Filled, Recipe, replays, unknown_to_survivors
    from dpmpi.resilient.recipe_entries import (derived_places, entries_for, own_records, place_taken, taken,
                                                with_entries)

    half = Recipe("Split", -1, {0: (0, 0), 1: (1, 1), 2: (0, 2), 3: (1, 3)})
    # rank 0's record (the even half) and rank 3's (the odd one): the same places, other contents
    evens = [half, Recipe("Split", 0, {0: (0, 4), 2: (0, 2)}), Recipe("Create", 0, {-1: ((0, 2), None)})]
    odds = [half, Recipe("Split", 0, {1: (0, 3), 3: (0, 1)}), Recipe("Create", 0, {-1: ((1, 3), None)})]
    assert derived_places(evens, [True, True, True]) == [1, 2]
    assert derived_places(evens, [True, False, True]) == [2]  # (not kept: not rebuilt)
    filled = {1: Filled("spare", 4), 2: Filled("dropped", -1)}
    assert taken(filled) == [1] and place_taken(filled, 4) == 1 and place_taken(filled, 0) == -1
    # the repair hands rank 0's record on; each active process brings its own and the replaced
    # rank's that it knows: rank 3 (whose half is 1 and 3) for rank 1
    places, inst = [1, 2], {0: {2: frozenset({0, 2})}, 3: {2: frozenset({1, 3})}}
    brought = [entries_for(own, places, [1, lr], inst[lr]) for own, lr in ((evens, 0), (odds, 3))] + [{}]
    assert brought[0] == {1: {0: (0, 4)}, 2: {0: evens[2].args}}
    assert brought[1] == {1: {1: (0, 3), 3: (0, 1)}, 2: {1: odds[2].args, 3: odds[2].args}}
    spare = with_entries(evens, places, brought, 1, fresh=True)  # the spare taking rank 1
    assert spare[1].args == {0: (0, 4), 2: (0, 2), 1: (0, 3), 3: (0, 1)} and spare[2] == odds[2]
    assert not unknown_to_survivors(spare[1], 1) and replays(spare[1], "Split", 0, 1, (0, 3))
    assert evens[1].args == {0: (0, 4), 2: (0, 2)}  # (not changed in place)
    # a survivor in the allgather way gets the even half's record: it keeps its own
    assert own_records(evens, odds, places) == odds and own_records(evens, [half], places) == evens
    assert with_entries(odds, places, brought, 3, fresh=False)[2] == odds[2]
    # both ranks of the odd half died: nobody brings theirs; the Create is marked, the Split lacks the entry
    lone = with_entries(evens, places, [brought[0], {}], 3, fresh=True)
    assert lone[2].args == {UNKNOWN: True} and unknown_to_survivors(lone[2], 3)
    assert unknown_to_survivors(lone[1], 3) and replays(lone[1], "Split", 0, 3, (7, 7))
    assert replays(lone[2], "Create", 0, 3, ((1, 3), None)) and not replays(lone[2], "Dup", 0, 3, None)
    assert lone[2].renumbered({0: 0, 3: 1}) == lone[2]
    assert not unknown_to_survivors(half, 5)  # (over the active communicator: every rank's entry)
    assert entries_for(lone, [2], [3], {2: frozenset({3})}) == {}  # an unknown one brings nothing
    # disjoint groups on the active communicator (each rank its parity's): its own group's over
    # another's; when every member of a group died, another's (the rank is outside it: COMM_NULL)
    pair = {0: [Recipe("Create_group", -1, {-1: ((0, 2), 3)}), Recipe("Create", -1, {-1: ((0, 2), None)})],
            3: [Recipe("Create_group", -1, {-1: ((1, 3), 3)}), Recipe("Create", -1, {-1: ((1, 3), None)})]}
    assert derived_places(pair[0], [True, True]) == [0, 1]
    got = {lr: entries_for(own, [0, 1], [1, lr], {}) for lr, own in pair.items()}
    assert got[0] == {p: {0: pair[0][p].args, 1: pair[0][p].args} for p in (0, 1)}
    assert got[3] == {p: {1: pair[3][p].args, 3: pair[3][p].args} for p in (0, 1)}
    for order in ([got[0], got[3]], [got[3], got[0]]):
        assert with_entries(pair[0], [0, 1], order, 1, fresh=True) == pair[3]
    assert with_entries(pair[0], [0, 1], [got[0]], 1, fresh=True) == pair[0]  # rank 3 died too
    # a survivor that holds neither the parent nor the communicator cannot tell its instance: it
    # brings its arguments for anyone, taken where nothing better came (never left to the call)
    from dpmpi.resilient.recipe_entries import ANYONE
    dups = [half, Recipe("Dup", 0, {-1: (("hint", "odd"),)})]
    blind = entries_for(dups, [1], [1, 3], {})
    assert blind == {1: {ANYONE: dups[1].args}}
    assert with_entries(dups, [1], [{}, blind], 1, fresh=True) == dups
    assert with_entries(dups, [1], [{}, {}], 1, fresh=True)[1].args == {UNKNOWN: True}
    sighted = {1: {1: {-1: (("hint", "seen"),)}}}  # (one that could tell its instance comes first)
    assert with_entries(dups, [1], [blind, sighted], 1, fresh=True)[1].args == sighted[1][1]


def test_a_repair_starts_from_the_newest_plan_any_live_process_holds():
    from dpmpi.resilient.plan import Plan, Recipe, View, newest_view

    old, new = Plan(1, (0, 1, 2), (3, 4)), Plan(2, (0, 3, 2), (4,))
    recipes = [Recipe("Dup", -1, {})]
    # spare 4 holds an older plan (a process can miss a commit); active ranks bring recipes, spares None
    views = [View(4, old, None), View(0, new, recipes), View(2, new, recipes)]
    alive, base, got = newest_view(views)
    assert alive == {0, 2, 4} and base == new and got == recipes
    assert newest_view([View(4, old, None), View(5, new, None)]) == ({4, 5}, new, [])  # no active rank left


def _and(rows):
    out = list(rows[0])
    for row in rows[1:]:
        out = [a & b for a, b in zip(out, row)]
    return out


def test_quick_reassign_holds_only_when_every_process_brings_the_same_plan():
    from dpmpi.resilient.plan import Plan, reassign_agreed, reassign_words

    plan = Plan(2, (0, 5, 2, 3), (4,), 6)
    same = [reassign_words(plan, True, has) for has in (True, False, True, False)]
    # one active rank has recipes: all learn it
    assert reassign_agreed(_and(same)) == (True, True, False, False, False, False, False, False, False)
    assert reassign_agreed(_and([reassign_words(plan, True, False)] * 3)) == (True, False, False, False, False, False,
                                                                            False, False, False)
    # a closed prologue (and whether its record holds something) is learnt from any active rank
    spare = reassign_words(plan, True, False)
    assert reassign_agreed(_and([spare, reassign_words(plan, True, False, True, False)]))[2:4] == (True, False)
    assert reassign_agreed(_and([reassign_words(plan, True, False, True, True), spare]))[2:4] == (True, True)
    assert reassign_agreed(_and([reassign_words(plan, True, False, True, by_program=True), spare])).by_program
    # so is a record of prologue calls on derived communicators (prologue_derived.py)
    assert reassign_agreed(_and([spare, reassign_words(plan, True, True, derived_kept=True), spare])).derived_kept
    assert not reassign_agreed(_and([spare, reassign_words(plan, True, True, True, True, True)])).derived_kept
    assert reassign_agreed(_and([reassign_words(plan, True, True, derived_left=True), spare])).derived_left
    # and an active rank still in its setup (plan.from_setup): the record handed says so
    assert reassign_agreed(_and([spare, reassign_words(plan, True, True, in_setup=True), spare])).in_setup
    assert not reassign_agreed(_and([spare, reassign_words(plan, True, True, True, True)])).in_setup
    from dpmpi.resilient.plan import from_setup
    in_run = ([("bcast",)], False, 1, 3, False, False)  # (a survivor in its first run's first snapshot)
    assert from_setup(in_run, True) == ([("bcast",)], False, 0, 3, True, False)  # (told: in the setup, with the others)
    assert from_setup(in_run, False) is in_run and from_setup(None, True) is None
    # a warm spare (already in its first run) called in while a survivor is in its setup: an error
    from dpmpi.resilient.plan import Filled, setup_not_redone
    warm = reassign_words(plan, True, False, warm=True)
    setup = reassign_words(plan, True, True, in_setup=True)
    spare_in = {1: Filled("spare", 4)}
    assert "no spare can take the place of rank(s) [1]" in setup_not_redone(reassign_agreed(_and([setup, warm])),
                                                                             spare_in)
    assert setup_not_redone(reassign_agreed(_and([setup, spare])), spare_in) == ""  # (a cold spare redoes it)
    assert setup_not_redone(reassign_agreed(_and([setup, warm])), {1: Filled("dropped", -1)}) == ""
    assert setup_not_redone(reassign_agreed(_and([spare, warm])), spare_in) == ""  # (survivors in their runs)
    # a process spawned by a repair (process id not its COMM_WORLD rank): the allgather way
    assert reassign_agreed(_and(same + [reassign_words(plan, False, False)]))[0] is False
    # a process that missed a commit, or any plan that differs in one field: the allgather way
    for other in (Plan(1, (0, 1, 2, 3), (4, 5), 6), Plan(2, (0, 5, 2, 3), (), 6), Plan(2, (0, 5, 2, 3), (4,), 7),
                  Plan(2, (5, 0, 2, 3), (4,), 6), Plan(3, (0, 5, 2, 3), (4,), 6)):
        for rows in (same + [reassign_words(other, True, False)], [reassign_words(other, True, True)] + same):
            assert reassign_agreed(_and(rows))[0] is False
    # every word is a non-negative C int
    assert all(0 <= w < 2**31 for row in same for w in row)


def test_recipes_go_from_a_rank_that_kept_its_place_to_the_spares_that_took_one():
    from dpmpi.resilient.plan import Plan, plan_repair, recipes_root

    base = Plan(0, (0, 1, 2, 3), (4, 5), 6)
    new, _failed, filled, _r = plan_repair(base, {1, 2, 3, 4, 5}, "shrink")  # rank 0 died: spare 4 takes it
    assert new.actives == (4, 1, 2, 3) and recipes_root(base, new, filled) == 1
    new, _failed, filled, _r = plan_repair(base, {0, 1, 2, 3, 5}, "shrink")  # a spare died: nobody new
    assert recipes_root(base, new, filled) == -1
    new, _failed, filled, _r = plan_repair(Plan(0, (0, 1), (), 2), {1}, "shrink")  # dropped, no spare
    assert recipes_root(Plan(0, (0, 1), (), 2), new, filled) == -1


# ---- snapshot planning (pure) ------------------------------------------------------------------
def test_buddies_and_owners_are_one_relation():
    from dpmpi.snapshot import buddies, owners

    assert buddies(0, 4, 1) == (1,) and owners(0, 4, 1) == (3,)
    assert buddies(3, 4, 2) == (0, 1) and owners(0, 4, 2) == (3, 2)
    assert buddies(0, 2, 5) == (1,) and buddies(0, 1, 1) == () and owners(0, 1, 1) == ()  # never itself
    for size, replicas in [(1, 0), (2, 1), (5, 1), (5, 2), (5, 4), (7, 3)]:
        for r in range(size):
            assert all(r in buddies(o, size, replicas) for o in owners(r, size, replicas))
            assert all(r in owners(b, size, replicas) for b in buddies(r, size, replicas))
            assert len(buddies(r, size, replicas)) == min(replicas, size - 1)


def _ring(epochs, size, gone=()):
    """What each rank holds with one ring buddy, every rank having committed ``epochs``; the
    ranks in ``gone`` are replacements that hold nothing."""
    return {r: {} if r in gone else {r: set(epochs), (r - 1) % size: set(epochs)} for r in range(size)}


def test_plan_restore_nothing_committed():
    from dpmpi.snapshot import plan_restore

    assert plan_restore({0: {}, 1: {}}, 2) == (-1, {}, ())
    assert plan_restore({0: {0: set()}}, 1) == (-1, {}, ())


def test_plan_restore_without_failure_restores_the_newest_common_epoch_locally():
    from dpmpi.snapshot import plan_restore

    assert plan_restore(_ring({4, 5}, 4), 4) == (5, {}, ())


def test_plan_restore_a_replacement_gets_its_copy_from_its_buddy():
    from dpmpi.snapshot import plan_restore

    assert plan_restore(_ring({4, 5}, 4, gone={1}), 4) == (5, {1: 2}, ())
    # two replacements, each with a live buddy
    assert plan_restore(_ring({4, 5}, 4, gone={0, 2}), 4) == (5, {0: 1, 2: 3}, ())


def test_plan_restore_the_lowest_holder_sends():
    from dpmpi.snapshot import plan_restore

    held = {0: {}, 1: {1: {5}, 0: {5}}, 2: {2: {5}, 0: {5}, 1: {5}}, 3: {3: {5}, 1: {5}, 2: {5}}}
    assert plan_restore(held, 4) == (5, {0: 1}, ())


def test_plan_restore_one_rank_lost_with_its_buddy():
    from dpmpi.snapshot import plan_restore

    # rank 1 and rank 2, which held rank 1's copies, were both replaced: rank 1's state is gone
    assert plan_restore(_ring({4, 5}, 4, gone={1, 2}), 4) == (-1, {}, (1,))


def test_plan_restore_survivors_at_different_epochs():
    from dpmpi.snapshot import plan_restore

    # rank 1 never got epoch 6 (the failure came during its commit): epoch 5 is common
    held = _ring({5, 6}, 3)
    held[1][1] = {4, 5}
    held[2][1] = {4, 5}
    assert plan_restore(held, 3) == (5, {}, ())
    # a replacement takes the common epoch from its buddy, which holds a newer one too
    held = _ring({5, 6}, 3, gone={2})
    held[1][1] = {4, 5}
    assert plan_restore(held, 3) == (5, {2: 0}, ())
    # no common epoch (no replicas): the rank behind the newest is the one whose state is lost
    assert plan_restore({0: {0: {6}}, 1: {1: {4}}, 2: {2: {6}}}, 3) == (-1, {}, (1,))


def test_plan_restore_ignores_copies_of_ranks_beyond_the_size():
    from dpmpi.snapshot import plan_restore

    # after a shrink to 2 ranks: a copy of (renumbered away) rank 2 is nobody's
    held = {0: {0: {5}, 2: {7}}, 1: {1: {5}, 0: {5}}}
    assert plan_restore(held, 2) == (5, {}, ())


def test_missing_copies_after_a_restore():
    from dpmpi.snapshot.plan import missing_copies

    held = _ring({5}, 4, gone={1})  # rank 1 was replaced: it holds neither its copy nor rank 0's
    assert missing_copies(1, 4, 1, 5, held) == (set(), {0})  # rank 2 still holds its copy
    assert missing_copies(0, 4, 1, 5, held) == ({1}, set())
    assert missing_copies(2, 4, 1, 5, held) == (set(), set())


def test_direct_receivers_are_replacements_that_need_not_send_their_copy_on():
    from dpmpi.snapshot.plan import direct_receivers, plan_restore

    held = _ring({5}, 4, gone={1})
    epoch, transfers, _ = plan_restore(held, 4)
    assert (epoch, transfers) == (5, {1: 2})
    assert direct_receivers(transfers, 4, 1, 5, held, {r: True for r in range(4)}) == {1}
    # device arrays: through a slot
    assert direct_receivers(transfers, 4, 1, 5, held, {1: False}) == set()
    # two replicas, ranks 1 and 2 replaced: rank 1's copy is still with rank 3, but its buddy 2
    # lacks it, so rank 1 must send its own copy on (from its slot): not direct; rank 2's buddies
    # are 3 (holds it) and 0 (holds it)
    held2 = {r: {} if r in (1, 2) else {o: {5} for o in (r, (r - 1) % 4, (r - 2) % 4)} for r in range(4)}
    epoch2, transfers2, _ = plan_restore(held2, 4)
    assert set(transfers2) == {1, 2}
    assert direct_receivers(transfers2, 4, 2, epoch2, held2, {r: True for r in range(4)}) == {2}


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
        "echo ran\n"
        "echo '[dpmpi-status] {\"rank\": 0, \"status\": 0}' >&2\n")  # what the rank's exit guard writes
    fake.chmod(0o755)
    env = dict(os.environ, DPMPI_MPIRUN=str(fake))
    proc = subprocess.run([sys.executable, "-m", "dpmpi.run", "-n", "1", "--", "hostname"], capture_output=True,
                          text=True, cwd="/", env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["ran"] and count.read_text().strip() == "2"
    assert "launching again, attempt 2 of 3" in proc.stderr
    assert "listener thread failed to start" in proc.stderr  # mpirun's own account is shown, not held back


def test_a_stuck_launch_whose_mpirun_ignores_the_end_is_killed(tmp_path):
    """Seen under load: ranks aborted in MPI_Init after one was killed, and prterun itself stayed
    stuck on a mutex in PRRTE's event loop, never handling the SIGTERM that dpmpi-run sent when
    it found the launch stuck: dpmpi-run waited for it for ever. Now it SIGKILLs mpirun
    ``init_loss.KILL_GRACE`` seconds later. The fake mpirun reports rank 1 dead before its
    MPI_Init returned and then ignores SIGTERM."""
    fake = tmp_path / "mpirun"
    fake.write_text(
        "#!/bin/sh\n"
        "echo '[vm:1] [prterun-vm-1@0,0] errmgr:dvm: proc [prterun-vm-1@1,1] aborted by signal' >&2\n"
        "trap '' TERM\n"
        "exec sleep 600\n")
    fake.chmod(0o755)
    env = dict(os.environ, DPMPI_MPIRUN=str(fake), DPMPI_START_RETRIES="0")
    # dpmpi-run with its two graces shortened (2 s for the verdict, 5 s for mpirun: 7 s of make test)
    launcher = ("import sys; from dpmpi import init_loss, run; init_loss.GRACE = 0.2; init_loss.KILL_GRACE = 0.5; "
                "sys.exit(run.main(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", launcher, "-n", "2", "--", "hostname"], capture_output=True,
                          text=True, cwd="/", env=env, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert "dpmpi-run: rank 1 died before its MPI_Init returned" in proc.stderr, proc.stderr


def test_open_mpis_notice_of_a_segment_a_death_in_start_up_left_unnamed_is_one_line_of_dpmpi_runs(tmp_path):
    """The notice goes through dpmpi-run's stderr pump (tests/test_run_nodes.py has the rules): a
    fake mpirun reports ranks 0 and 2 initialised, prints Open MPI's notice, then rank 1 killed."""
    rule = "-" * 74
    said = tmp_path / "stderr.txt"
    said.write_text(
        f"[dpmpi-init] 0\n[dpmpi-init] 2\n{rule}\nA system call failed during shared memory initialization that "
        f"should\nnot have.\n  System call: open(2) \n  Error:       No such file or directory (errno 2)\n{rule}\n"
        "[vm:1] [prterun-vm-1@0,0] errmgr:dvm: proc [prterun-vm-1@1,1] aborted by signal\n")
    fake = tmp_path / "mpirun"
    fake.write_text(f"#!/bin/sh\ncat {said} >&2\n")
    fake.chmod(0o755)
    proc = subprocess.run([sys.executable, "-m", "dpmpi.run", "-n", "3", "--", "hostname"], capture_output=True,
                          text=True, cwd="/", env=dict(os.environ, DPMPI_MPIRUN=str(fake)), timeout=60)
    assert "not have." not in proc.stderr and rule not in proc.stderr, proc.stderr  # (Open MPI's block)
    assert "dpmpi-run: 1 process(es) printed Open MPI's \"A system call failed during shared memory" in proc.stderr


def test_a_program_mpirun_cannot_launch_is_said_so_not_killed_by_a_signal(tmp_path):
    """dpmpi-run's account said "every rank died without a status (killed by a signal)" when
    mpirun could not start the program at all (a path that does not exist, a file that is not
    executable): PRRTE's own message says why; the account now says no rank ran."""
    plain = tmp_path / "prog.txt"
    plain.write_text("not a program\n")
    plain.chmod(0o644)
    for prog in ("/nonexistent/dpmpi-prog", str(plain)):
        proc = subprocess.run([sys.executable, "-m", "dpmpi.run", "-n", "2", "--", prog], capture_output=True,
                              text=True, cwd="/", timeout=60)
        assert proc.returncode == 1, proc.stderr
        assert "mpirun could not launch the program (its message above); no rank ran" in proc.stderr, proc.stderr
        assert "killed by a signal" not in proc.stderr and "unable to launch" in proc.stderr, proc.stderr


# ---- hung-rank detector (heartbeat): the setting, and the C thread in plain processes (no MPI) ----
import struct  # noqa: E402
from pathlib import Path  # noqa: E402

from dpmpi import heartbeat  # noqa: E402

HB_PROC = Path(__file__).resolve().parent / "programs" / "hb_proc.py"
HB_LINE = "sent no heartbeat"


@pytest.mark.parametrize("raw, want", [(None, 10.0), ("", 10.0), ("0", 0.0), ("1", 1.0), (" 2.5 ", 2.5), ("60", 60.0)])
def test_heartbeat_timeout_setting(raw, want):
    env = {} if raw is None else {heartbeat.ENV_HEARTBEAT_TIMEOUT: raw}
    assert heartbeat.timeout_from_env(env) == want


@pytest.mark.parametrize("raw", ["0.5", "0.99", "-1", "abc", "10s", "nan", "inf"])
def test_heartbeat_timeout_setting_rejects(raw):
    with pytest.raises(ValueError, match="DPMPI_HEARTBEAT_TIMEOUT") as info:
        heartbeat.timeout_from_env({heartbeat.ENV_HEARTBEAT_TIMEOUT: raw})
    assert repr(raw) in str(info.value)


def test_heartbeat_job_id():
    job = heartbeat.job_id_from_env
    assert job({"PMIX_NAMESPACE": "prterun-vm-5766@1"}) == "prterun-vm-5766"
    assert job({"PMIX_NAMESPACE": "prterun-vm-5766@2"}) == "prterun-vm-5766"  # a job a repair spawned
    assert job({"PMIX_NAMESPACE": "../a/b c@1"}) == "a_b_c"
    assert job({"OMPI_MCA_ess_base_jobid": "123456"}) == "123456"
    assert job({}) is None and job({"PMIX_NAMESPACE": "@1"}) is None
    assert heartbeat.job_dir("x") == "/dev/shm/dpmpi-hb-x"


def test_a_bad_heartbeat_setting_fails_the_rank_and_dpmpi_run_early():
    env = dict(os.environ, OMPI_COMM_WORLD_RANK="0", DPMPI_HEARTBEAT_TIMEOUT="0.5")
    p = subprocess.run([sys.executable, "-c", "import dpmpi"], capture_output=True, text=True, cwd="/", env=env,
                       timeout=60)
    assert p.returncode != 0 and "DPMPI_HEARTBEAT_TIMEOUT='0.5'" in p.stderr, p.stderr
    env.pop("OMPI_COMM_WORLD_RANK")
    p = subprocess.run([sys.executable, "-m", "dpmpi.run", "-n", "2", "--", "hostname"], capture_output=True,
                       text=True, cwd="/", env=env, timeout=60)
    assert p.returncode == 2 and "DPMPI_HEARTBEAT_TIMEOUT='0.5'" in p.stderr, p.stderr


class HbProc:
    """A plain process running the heartbeat thread (tests/programs/hb_proc.py); ready on return."""

    def __init__(self, directory, rank, action, *rest, timeout=1):
        self.p = subprocess.Popen([sys.executable, str(HB_PROC), str(directory), str(rank), str(timeout), action,
                                   *map(str, rest)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        assert self.p.stdout.readline().strip() == "ready", self.p.stderr.read()  # bounded by the test's timeout
        self.pid = self.p.pid

    def finish(self, timeout=30):
        """Close stdin (a waiting process exits), wait; returns (returncode, stdout, stderr)."""
        out, err = self.p.communicate(timeout=timeout)
        return self.p.returncode, out, err

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.communicate()


@pytest.fixture
def hb_procs():
    procs = []

    def start(*args, **kw):
        procs.append(HbProc(*args, **kw))
        return procs[-1]

    yield start
    for p in procs:
        p.kill()


@pytest.mark.timeout(60)
def test_heartbeat_kills_a_stopped_process_exactly_once(tmp_path, hb_procs):
    d = tmp_path / "job"
    watchers = [hb_procs(d, r, "wait") for r in range(3)]
    victim = hb_procs(d, 7, "stop")
    assert victim.p.wait(timeout=20) == -9  # SIGKILL, within T + a period of its stop
    results = [w.finish() for w in watchers]
    assert all(rc == 0 for rc, _o, _e in results), results
    lines = [line for _rc, _o, err in results for line in err.splitlines() if HB_LINE in line]
    assert len(lines) == 1, results
    assert lines[0].startswith(f"[dpmpi] rank 7 (pid {victim.pid}) sent no heartbeat for ")
    assert "killed (SIGKILL) so the job can recover" in lines[0]
    assert not d.exists()  # the last one out removed the job's directory (and the victim's file)


@pytest.mark.long  # ~3 s (make test's budget; make test-long runs it)
@pytest.mark.timeout(60)
def test_heartbeat_spares_a_process_that_sleeps_or_holds_the_gil(tmp_path, hb_procs):
    d = tmp_path / "job"
    watcher = hb_procs(d, 0, "wait")
    sleeper = hb_procs(d, 1, "sleep", 3)  # 3 T: only the C thread beats
    spinner = hb_procs(d, 2, "spin", 3)   # holds the GIL for 3 T
    assert sleeper.finish() == (0, "exiting\n", "")
    assert spinner.finish() == (0, "exiting\n", "")
    rc, _out, err = watcher.finish()
    assert rc == 0 and HB_LINE not in err, err
    assert not d.exists()


def _start_ticks(pid):
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[19])


def _fake_file(d, pid, ticks):
    """A heartbeat file (cext/dpmpi_hb.c's layout) that stopped beating long ago."""
    d.mkdir(exist_ok=True)
    data = struct.pack("<IIiiQqqi20x", 0x42485044, 1, pid, 9, ticks, 1_000_000_000, 0, 1)
    (d / f"pid-{pid}").write_bytes(data)


@pytest.mark.timeout(60)
def test_heartbeat_leftovers_of_gone_or_reused_pids_kill_nothing(tmp_path, hb_procs):
    d = tmp_path / "job"
    bystander = subprocess.Popen(["sleep", "60"])  # its pid is in a stale file, with another start time
    try:
        gone = subprocess.Popen(["true"])
        gone.wait()
        _fake_file(d, bystander.pid, _start_ticks(bystander.pid) + 1)
        _fake_file(d, gone.pid, 12345)
        watcher = hb_procs(d, 0, "wait")
        deadline = time.monotonic() + 20
        while (d / f"pid-{bystander.pid}").exists() or (d / f"pid-{gone.pid}").exists():  # removed as leftovers
            assert time.monotonic() < deadline, sorted(p.name for p in d.iterdir())
            time.sleep(0.05)
        assert bystander.poll() is None  # not killed
        rc, _out, err = watcher.finish()
        assert rc == 0 and HB_LINE not in err, err
        assert not d.exists()
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.timeout(60)
def test_heartbeat_file_survives_a_forked_child_exit(tmp_path, hb_procs):
    d = tmp_path / "job"
    parent = hb_procs(d, 0, "fork-exit")
    assert parent.p.stdout.readline() == "child-done\n"
    assert (d / f"pid-{parent.pid}").exists()  # the child's exit handlers left it alone
    assert parent.finish()[0] == 0
    assert not d.exists()


@pytest.mark.timeout(60)
def test_heartbeat_start_removes_directories_of_ended_jobs_only(tmp_path, hb_procs):
    # ranks that end through the Finalize watchdog (_exit) leave their files behind
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        gone = subprocess.Popen(["true"])
        gone.wait()
        _fake_file(tmp_path / "dpmpi-hb-ended", gone.pid, 12345)
        _fake_file(tmp_path / "dpmpi-hb-running", bystander.pid, _start_ticks(bystander.pid))
        _fake_file(tmp_path / "not-ours", gone.pid, 12345)
        proc = hb_procs(tmp_path / "dpmpi-hb-new", 0, "wait")  # ready: the sweep is done
        assert sorted(p.name for p in tmp_path.iterdir()) == ["dpmpi-hb-new", "dpmpi-hb-running", "not-ours"]
        assert proc.finish()[0] == 0
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


def _beat(d, pid):
    return struct.unpack_from("<q", (d / f"pid-{pid}").read_bytes(), 32)[0]


def _beaten_again(d, procs, times=3):
    """Until each of ``procs`` has beaten ``times`` times more (polling its file), none of them gone."""
    seen = {p.pid: set() for p in procs}
    before = {p.pid: _beat(d, p.pid) for p in procs}
    deadline = time.monotonic() + 20
    while any(len(v) < times for v in seen.values()):
        assert time.monotonic() < deadline and all(p.p.poll() is None for p in procs), seen
        for p in procs:
            if (beat := _beat(d, p.pid)) != before[p.pid]:
                seen[p.pid].add(beat)
        time.sleep(0.02)


@pytest.mark.long  # ~3 s (make test's budget; make test-long runs it)
@pytest.mark.timeout(60)
def test_heartbeat_a_whole_job_stopped_and_continued_loses_no_process(tmp_path, hb_procs):
    import signal

    d = tmp_path / "job"
    procs = [hb_procs(d, r, "wait") for r in range(3)]
    for p in procs:
        os.kill(p.pid, signal.SIGSTOP)
    time.sleep(2.5)  # not a synchronisation: the time the job stays stopped (2.5 T)
    for p in procs:
        os.kill(p.pid, signal.SIGCONT)
    _beaten_again(d, procs)  # its judging rounds after the gap are over
    results = [p.finish() for p in procs]
    assert all(rc == 0 and HB_LINE not in err for rc, _o, err in results), results


@pytest.mark.timeout(60)
def test_heartbeat_judges_only_the_silence_a_watcher_saw_itself(tmp_path, hb_procs):
    # the whole machine stalled (chaos saw a 47-s VM stall): a watcher that runs again before
    # its peers must not count the stall in their silence and kill them a period later
    import signal

    d = tmp_path / "job"
    first, *late = [hb_procs(d, r, "wait") for r in range(3)]
    for p in (first, *late):
        os.kill(p.pid, signal.SIGSTOP)
    time.sleep(2.5)  # not a synchronisation: how long the "machine" stays stalled (2.5 T)
    os.kill(first.pid, signal.SIGCONT)
    time.sleep(0.6)  # not a synchronisation: the others run again 0.6 T (3 periods) later
    for p in late:
        os.kill(p.pid, signal.SIGCONT)
    _beaten_again(d, late)
    results = [p.finish() for p in (first, *late)]
    assert all(rc == 0 and HB_LINE not in err for rc, _o, err in results), results


def test_a_repair_stuck_past_its_deadline_ends_the_process(monkeypatch):
    # a Respawn that a further failure left stuck inside MPI hung every survivor forever; the
    # watchdog ends the process as a failure instead (here: the stand-in for _guard.die is called)
    import threading

    from dpmpi import _guard
    from dpmpi.resilient.watchdog import Watchdog

    fired = threading.Event()
    causes = []
    monkeypatch.setattr(_guard, "die", lambda status, cause: (causes.append((status, cause)), fired.set()))
    dog = Watchdog()
    with dog.armed(0.05, "Respawn"):
        assert fired.wait(10)
    assert causes[0][0] == 1 and "Respawn did not complete within 0.05 s" in causes[0][1]


@pytest.mark.parametrize("raw, ok", [("", 60.0), ("2.5", 2.5), ("0", None), ("-1", None), ("soon", None)])
def test_repair_timeout_setting(monkeypatch, raw, ok):
    from dpmpi.resilient import settings

    monkeypatch.setenv("DPMPI_REPAIR_TIMEOUT", raw)
    if ok is None:
        with pytest.raises(ValueError, match="DPMPI_REPAIR_TIMEOUT"):
            settings.repair_timeout()
    else:
        assert settings.repair_timeout() == ok


def test_repair_listeners_are_weak_ordered_and_unique():
    import gc

    from dpmpi.resilient import Listeners

    class L:
        pass

    ls = Listeners()
    a, b = L(), L()
    ls.add(a)
    ls.add(b)
    ls.add(a)  # twice: told once
    assert ls.snapshot() == [a, b]
    del a
    gc.collect()
    assert ls.snapshot() == [b]  # held weakly: a dead listener is not called
    ls.discard(b)
    ls.discard(b)  # no error
    assert ls.snapshot() == []


def test_a_garbled_message_is_a_peer_failure_only_while_a_failure_is_known(monkeypatch):
    """A pickle whose tail a peer's death left unwritten raises UnicodeDecodeError, OverflowError,
    ... about half the time, errors a program's own objects can raise when unpickled too: a
    lower-case call raises ProcFailedError for them only while this process knows of a failure
    (before, they ended the rank); a torn message's UnpicklingError and a pickle protocol no
    pickler writes are a peer failure always; other errors are the program's."""
    import pickle

    from dpmpi import calls
    from dpmpi.errors import ProcFailedError
    from dpmpi.mpicall import torn

    garbled = UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")
    assert torn(garbled, lambda: True) and not torn(garbled) and not torn(garbled, lambda: False)
    assert torn(OverflowError("x"), lambda: True) and torn(ModuleNotFoundError("x"), lambda: True)
    assert not torn(ZeroDivisionError(), lambda: True)  # (not what unpickling raises)
    assert torn(pickle.UnpicklingError("invalid load key")) and torn(ValueError("unsupported pickle protocol: 154"))

    def recv():
        raise garbled

    call = calls.translating("recv", recv, None, lambda op, result, comm: result)
    with pytest.raises(UnicodeDecodeError):  # no failure known: the program's error, as it is
        call()
    monkeypatch.setattr(calls, "failure_known", lambda comm: True)
    with pytest.raises(ProcFailedError) as info:
        call()
    assert info.value.__cause__ is garbled
    upper = calls.translating("Recv", recv, None, lambda op, result, comm: result)
    with pytest.raises(UnicodeDecodeError):  # (an upper-case call unpickles nothing)
        upper()


def test_a_torn_exchange_during_a_failure_is_a_peer_failure():
    """A peer dying inside a collective exchange of Python objects can leave a survivor with a
    torn message (an UnpicklingError ended a healthy rank in a chaos run): dpmpi reports it as
    the peer failure it is."""
    import pickle

    from mpi4py import MPI

    from dpmpi.errors import ProcFailedError, from_mpi
    from dpmpi.mpicall import exchange

    def torn():
        raise pickle.UnpicklingError("invalid load key, '\\xc0'.")

    with pytest.raises(MPI.Exception) as info:
        exchange(torn)
    assert info.value.Get_error_class() == MPI.ERR_PROC_FAILED
    assert isinstance(info.value.__cause__, pickle.UnpicklingError)
    assert isinstance(from_mpi(info.value, None, "restore"), ProcFailedError)
    assert exchange(lambda: [1, 2]) == [1, 2]
    with pytest.raises(MPI.Exception) as revoked:  # MPI's own errors pass through unchanged
        exchange(lambda: (_ for _ in ()).throw(MPI.Exception(MPI.ERR_REVOKED)))
    assert revoked.value.Get_error_class() == MPI.ERR_REVOKED


def test_a_hung_jobs_report_holds_its_processes_stacks():
    # what the fault tests print when a job hangs (tests/conftest.py, dpmpi.cluster_sim.Job)
    from dpmpi import cluster_sim
    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        assert cluster_sim.session_pids(proc.pid) == [proc.pid]
        text = cluster_sim.stacks([proc.pid])
        assert text.startswith(f"== process {proc.pid} (sleep)"), text
        if shutil.which("gdb"):  # frames, or why gdb could not read them (e.g. ptrace not permitted)
            assert "\n#0 " in text or "gdb read no stack" in text, text
        else:
            assert "gdb not found" in text
    finally:
        proc.kill()
        proc.wait()


# -- restore by reading the holder's memory on one node: who reads from whom (dpmpi.snapshot.pull) --
def test_a_restore_reads_a_copy_only_from_a_holder_of_the_same_node_namespace_and_user():
    from dpmpi.snapshot import pull

    same = ((1, 9), 1000)  # pid namespace, user
    nodes = ["a", "a", "b", "a", "a"]
    offers = [((same, 100), {}),
              ((same, 101), {0: {6: 0x1000, 7: 0x2000}, 3: {7: 0x3000}}),  # holds 0's and 3's copies
              ((same, 102), {1: {7: 0x4000}}),
              ((same, 103), {2: {7: 0x5000}}),
              (None, {})]  # DPMPI_RESTORE_PULL=0
    # rank 0 reads epoch 7 from rank 1 (same node); rank 1 cannot read from rank 2 (another
    # node); rank 2 reads from rank 3 across nodes: no
    assert pull.plan({0: 1, 1: 2, 2: 3}, offers, 7, nodes) == {0: (101, 0x2000)}
    assert pull.plan({0: 1}, offers, 6, nodes) == {0: (101, 0x1000)}
    assert pull.plan({0: 1}, offers, 5, nodes) == {}  # the holder does not hold that epoch
    assert pull.plan({4: 1}, offers, 7, nodes) == {}  # the receiver does not read
    assert pull.plan({3: 1}, offers, 7, nodes) == {3: (101, 0x3000)}
    other_ns = [((((1, 8), 1000), 100), {}), offers[1]]
    other_user = [((((1, 9), 0), 100), {}), offers[1]]
    assert pull.plan({0: 1}, other_ns, 7, nodes) == {} and pull.plan({0: 1}, other_user, 7, nodes) == {}


# -- a commit's streamed replication: when it streams (dpmpi.snapshot.replication.streams) --
def test_a_commit_streams_its_replication_only_where_the_snapshot_threads_have_cpus_of_their_own():
    from dpmpi.snapshot.replication import streams

    assert streams("auto", 3) and not streams("auto", 0)  # auto: only beside the program, not on its core
    assert streams("1", 0) and streams("1", 5)
    assert not streams("0", 0) and not streams("0", 5)


# -- restore by page exchange: pure decisions (dpmpi.snapshot.pageswap) and the layout --
def test_pageswap_reads_only_private_anonymous_mappings():
    from dpmpi.snapshot import pageswap

    maps = "\n".join([
        "7f0000000000-7f0000100000 rw-p 00000000 00:00 0 ",
        "7f0000100000-7f0000200000 rw-p 00000000 00:00 0",  # adjacent: merged
        "7f0000300000-7f0000400000 rw-s 00000000 00:01 1234 /dev/zero (deleted)",  # shared
        "7f0000400000-7f0000500000 rw-p 00000000 08:01 99 /data/w.bin",  # a private file mapping
        "7f0000500000-7f0000600000 r--p 00000000 00:00 0",  # read-only
        "55d000000000-55d000100000 rw-p 00000000 00:00 0 [heap]",
        "7ffd00000000-7ffd00100000 rw-p 00000000 00:00 0 [stack]",
    ])
    ranges = pageswap.parse_maps(maps)
    assert ranges == [(0x7f0000000000, 0x7f0000200000), (0x55d000000000, 0x55d000100000)]
    assert pageswap.covered(ranges, 0x7f00000ff000, 0x7f0000101000)
    assert not pageswap.covered(ranges, 0x7f00001ff000, 0x7f0000201000)
    assert not pageswap.covered(ranges, 0x7f0000400010, 0x7f0000400020)


def test_pageswap_split_and_shift():
    from dpmpi.snapshot import pageswap

    page = 4096
    assert pageswap.split(0x10010, 0x20010, 3 * page, page) == (page - 16, 2 * page)
    assert pageswap.split(0x10000, 0x20000, 3 * page + 5, page) == (0, 3 * page)
    assert pageswap.split(0x10010, 0x20020, 3 * page, page) is None  # not at the same offset in a page
    assert pageswap.split(0x10010, 0x20010, page, page) is None  # no whole page inside
    assert pageswap.shift_for([(0x10010, 100), (0x20020, 50), (0x30010, 1)], page) == 16
    assert pageswap.shift_for([], page) == 0


def test_large_arrays_start_at_page_offsets_in_a_slot():
    from dpmpi.snapshot.layout import from_signature

    sig = [["a", "B", [100], 100], ["b", "d", [10000], 80000], ["c", "B", [3], 3], ["d", "B", [65536], 65536]]
    offsets = [e.offset for e in from_signature(sig)]
    assert offsets == [0, 4096, 4096 + 80000, 4096 * 21]


def _prologue_with(monkeypatch, limit=None):
    from dpmpi.resilient import prologue

    if limit is not None:
        monkeypatch.setenv("DPMPI_PROLOGUE_MAX", str(limit))
    return prologue, prologue.Prologue()


def test_a_replacement_gets_the_results_of_the_survivors_prologue_in_order(monkeypatch):
    """Survivors record the replayable collectives before their first snapshot; a replacement's
    own calls are answered from that record: objects unpickled afresh, buffers written in place."""
    import numpy as np
    from mpi4py import MPI

    prologue, mine = _prologue_with(monkeypatch)
    w = np.arange(6, dtype=np.float64)
    mine.record("Bcast", ([w, MPI.DOUBLE], 0), {}, None)
    cfg = {"lr": 0.01, "layers": [3, 4]}
    mine.record("bcast", (None,), {"root": 0}, cfg)
    mine.record("allreduce", (3,), {}, 10)
    mine.record("Barrier", (), {}, None)
    total = np.zeros(2)
    total[:] = 7.5
    mine.record("Allreduce", (MPI.IN_PLACE, total), {}, None)
    assert mine.recording and mine.handover() is None  # (still open: nothing to hand over yet)
    cfg["lr"] = 99  # the program changes what it got: the record keeps what was received
    mine.close()
    assert not mine.recording and mine.done
    handed = mine.handover()
    assert [e.op for e in handed[0]] == ["Bcast", "bcast", "allreduce", "Barrier", "Allreduce"] and handed[1] is False

    new = prologue.Prologue()
    new.adopt(handed)
    assert new.replaying == 0 and not new.done
    w2 = np.zeros(6)
    assert new.replay("Bcast", (w2,), {"root": 0}) is None and w2.tolist() == list(range(6))
    assert new.replay("bcast", ({"wrong": 1},), {}) == {"lr": 0.01, "layers": [3, 4]}
    assert new.replay("allreduce", (1,), {}) == 10
    assert new.replay("Barrier", (), {}) is None
    got = np.zeros(2)
    new.replay("Allreduce", (MPI.IN_PLACE, got), {})
    assert got.tolist() == [7.5, 7.5]
    with pytest.raises(prologue.ReplayError, match="made 5 such call"):  # more than the survivors made
        new.replay("barrier", (), {})
    new.close()  # its first snapshot operation: the replay is over, the record is kept for later replacements
    assert new.done and new.handover()[0] == handed[0]


def test_a_replacement_gets_the_failed_ranks_own_result_of_a_scan_exscan_or_alltoall(monkeypatch):
    """scan, exscan and alltoall (either case) give each rank its own result: in an open prologue
    every rank's is allgathered after the call (guarded, with the communicator's plain allgather),
    so the record holds the failed rank's, which its replacement gets (an Exscan leaves rank 0's
    buffer as it is). Allgatherv is recorded whole, as given with its counts. Before the
    forty-fourth session each raised ReplayError on the replacement (the job went on with fewer ranks)."""
    import numpy as np
    from mpi4py import MPI

    prologue, mine = _prologue_with(monkeypatch)
    results = {"exscan": [None, 4, 9, 15], "alltoall": [[0, 1], [10, 11], [20, 21], [30, 31]]}

    def plain_of(name):  # (the other ranks' results, as this rank 2's allgather would return them)
        assert name == "allgather"
        return lambda mine_: [MPI.pickle.dumps(x) for x in results[op]] if op.islower() else parts
    for op in ("exscan", "alltoall"):
        call = prologue.guarded(mine, op, lambda *a: results[op][2], False, lambda: None, lambda: 2, plain_of)
        assert call(5) == results[op][2]
    parts = [np.full(2, float(r)).tobytes() for r in range(4)]
    op = "Scan"
    scan = prologue.guarded(mine, "Scan", lambda s, r_: r_.__setitem__(slice(None), 2.0), False, lambda: None,
                            lambda: 2, plain_of)
    out = np.zeros(2)
    scan(MPI.IN_PLACE, out)
    assert out.tolist() == [2.0, 2.0]
    every = np.arange(6.0)
    mine.record("Allgatherv", (np.ones(1), [every, [1, 2, 3], [0, 1, 3], MPI.DOUBLE]), {}, None)
    mine.close()
    assert [e.op for e in mine.handover()[0]] == ["exscan", "alltoall", "Scan", "Allgatherv"]
    for rank, want in ((1, 4), (0, None)):  # (the replacement of rank 1, then of rank 0)
        new = prologue.Prologue()
        new.adopt(mine.handover())
        assert new.replay("exscan", (1,), {}, rank) == want
        assert new.replay("alltoall", ([7, 7],), {}, rank) == results["alltoall"][rank]
        got = np.full(2, -1.0)
        new.replay("Scan", (MPI.IN_PLACE, got), {}, rank)
        assert got.tolist() == [float(rank)] * 2
        whole = np.zeros(6)
        new.replay("Allgatherv", (np.ones(1), [whole, [1, 2, 3], [0, 1, 3], MPI.DOUBLE]), {})
        assert whole.tolist() == every.tolist()
    new = prologue.Prologue()
    new.adopt(mine.handover())
    with pytest.raises(prologue.ReplayError, match="not among the 4 recorded"):
        new.replay("exscan", (1,), {}, 6)


def test_a_replacement_redoes_the_setups_vector_collectives_and_reduce_scatters(monkeypatch):
    """Scatterv (its root records its parts, from its counts and displacements), Gatherv (its
    root's whole receive buffer told to every rank), Alltoallv and Reduce_scatter(_block) (every
    rank's whole receive buffer allgathered): a replacement gets the failed rank's result, as
    mpi4py reads each buffer argument (msgspec). Before, each raised ReplayError on the
    replacement, a setup that distributed its data with Scatterv lost every spare."""
    import numpy as np
    from mpi4py import MPI

    from dpmpi.resilient import msgspec
    data = np.arange(10.0)
    assert [bytes(b) for b in msgspec.parts([data, [1, 2, 3, 4], [0, 1, 3, 6], MPI.DOUBLE])] == \
        [data[0:1].tobytes(), data[1:3].tobytes(), data[3:6].tobytes(), data[6:10].tobytes()]
    assert [b.nbytes for b in msgspec.parts([data, ([3, 3], [4, 0])])] == [24, 24]
    assert [b.nbytes for b in msgspec.parts(data, 4)] == [24, 24, 16, 16]  # (mpi4py's split of 10 by 4)
    assert [b.tobytes() for b in msgspec.parts([data, 2, 3, "d"], 3)][2] == data[6:8].tobytes()  # (strided)
    assert msgspec.region([data, (2, 5), MPI.DOUBLE]).tobytes() == data[5:7].tobytes()
    assert msgspec.region([data, 3]).nbytes == 24 and msgspec.region(data).nbytes == 80
    with pytest.raises(ValueError, match="not known here"):
        msgspec.parts(data)
    with pytest.raises(ValueError, match="beyond its buffer"):
        msgspec.region([data, (4, 8), MPI.DOUBLE])

    prologue, mine = _prologue_with(monkeypatch)  # (rank 0: the Scatterv's root; rank 1 the Gatherv's)
    counts, starts = [1, 2, 3, 4], [0, 1, 3, 6]
    mine.record("Scatterv", ([data, counts, starts, MPI.DOUBLE], np.zeros(1), 0), {}, None, 0)
    gathered = np.arange(10.0) * 3
    told = gathered.tobytes()  # (what rank 1's broadcast of its whole buffer gave every rank)
    gatherv = prologue.guarded(mine, "Gatherv", lambda *a: None, False, lambda: None, lambda: 0,
                               lambda name: (lambda mine_, root: told))
    gatherv(np.zeros(1), None, 1)
    exchanged = [np.full(3, float(r)).tobytes() for r in range(4)]
    for op in ("Alltoallv", "Reduce_scatter_block"):
        call = prologue.guarded(mine, op, lambda *a: None, False, lambda: None, lambda: 0,
                                lambda name: (lambda mine_: exchanged))
        call(np.zeros(3), [np.zeros(3), [1, 1, 1, 0]])
    mine.close()
    assert [e.op for e in mine.handover()[0]] == ["Scatterv", "Gatherv", "Alltoallv", "Reduce_scatter_block"]
    for rank in (2, 1, 0):
        new = prologue.Prologue()
        new.adopt(mine.handover())
        part = np.zeros(counts[rank])
        new.replay("Scatterv", ([data, counts, starts, MPI.DOUBLE] if rank == 0 else None, part, 0), {}, rank)
        assert part.tolist() == data[starts[rank]:starts[rank] + counts[rank]].tolist()
        whole = np.zeros(10)
        assert new.replay("Gatherv", (np.zeros(1), [whole, counts] if rank == 1 else None, 1), {}, rank) is None
        assert whole.tolist() == (gathered.tolist() if rank == 1 else [0.0] * 10)
        for op in ("Alltoallv", "Reduce_scatter_block"):
            got = np.zeros(3)
            new.replay(op, (MPI.IN_PLACE, [got, [1, 1, 1, 0]]), {}, rank)
            assert got.tolist() == [float(rank)] * 3
    new = prologue.Prologue()
    new.adopt(mine.handover())
    with pytest.raises(prologue.ReplayError, match="holds 24 bytes, its part 16"):
        new.replay("Scatterv", (None, np.zeros(3), 0), {}, 1)


def test_a_replacements_receives_in_the_prologue_are_answered_from_what_its_survivors_sent(monkeypatch):
    """prologue_p2p: each survivor logs the messages it sends outside the runs, by destination; a
    repair hands a replacement those sent to its rank; its receive from a survivor takes the
    first one that matches its tag (in the order sent), its send to a survivor is logged and not
    made, and with a peer replaced in the same repair both calls are made for real. A receive
    from ANY_SOURCE, or in the part of the program its survivors failed in, raises ReplayError."""
    import numpy as np
    from mpi4py import MPI

    from dpmpi.resilient import prologue_p2p as p2p
    assert p2p.parse("Sendrecv", (b"x", 1), {"recvbuf": None, "source": 3, "recvtag": 4}).recv[1:3] == (3, 4)
    assert p2p.parse("send", (), {"obj": 5, "dest": 2}).send == (5, 2, 0)
    assert p2p.parse("recv", (None, 1, 7), {}).recv[1:3] == (1, 7)
    prologue, survivor = _prologue_with(monkeypatch)  # (logical rank 1; the replacement takes rank 2)
    real = []

    def plain_of(name):
        return lambda *a, **k: real.append((name, a)) or "real"
    fn = lambda *a, **k: None  # noqa: E731 (the call itself, made)
    p2p.point_to_point(survivor, "Send", fn, (np.arange(3.0), 2, 5), {}, plain_of)
    p2p.point_to_point(survivor, "send", fn, ({"a": 1}, 2), {"tag": 6}, plain_of)
    p2p.point_to_point(survivor, "Send", fn, (np.arange(3.0) + 10, 2, 5), {}, plain_of)
    p2p.point_to_point(survivor, "send", fn, ("to 3", 3), {}, plain_of)
    assert survivor.p2p.made and sorted(survivor.p2p.sent) == [(-1, 2), (-1, 3)] and survivor.size > 0
    pair = p2p.Peers(4, (3, 2))  # (a derived communicator at place 4: rank 1 there is logical rank 2)
    p2p.point_to_point(survivor, "send", fn, ("on the pair", 1), {}, plain_of, pair)
    offered = survivor.p2p.offers(1, {2})
    assert [(src, place, dest, len(msgs)) for src, place, dest, msgs in offered] == [(1, -1, 2, 3), (1, 4, 2, 1)]
    new = prologue.Prologue()
    new.p2p.stage([offered, []], 2, [2, 0])  # (rank 0 is replaced in the same repair)
    new.adopt((survivor.entries, False, 1, 0, False, False))
    assert new.replaying is not None and new.p2p.fresh == {2, 0}
    got, status = np.zeros(4), MPI.Status()
    assert p2p.point_to_point(new, "recv", fn, (None, 1, 6), {}, plain_of) == {"a": 1}  # (by tag: overtakes none)
    assert p2p.point_to_point(new, "recv", fn, (None, 0), {}, plain_of, p2p.Peers(4, (1, 2))) == "on the pair"
    p2p.point_to_point(new, "Recv", fn, (got, 1, 5, status), {}, plain_of)
    assert got.tolist() == [0.0, 1.0, 2.0, 0.0] and status.Get_count(MPI.DOUBLE) == 3 and status.Get_tag() == 5
    edge = np.full(3, 7.0)
    p2p.point_to_point(new, "Sendrecv_replace", fn, (edge, 1), {"source": 1, "recvtag": 5}, plain_of)
    assert edge.tolist() == [10.0, 11.0, 12.0] and new.p2p.sent[-1, 1][0].payload == np.full(3, 7.0).tobytes()
    assert real == []  # (nothing made for real with the survivor)
    assert p2p.point_to_point(new, "sendrecv", fn, ("x", 0), {"source": 0}, plain_of) == "real"
    assert real[-1] == ("sendrecv", ("x", 0)) and len(new.p2p.sent[-1, 0]) == 1  # (with rank 0's replacement)
    with pytest.raises(prologue.ReplayError, match="ANY_SOURCE"):
        p2p.point_to_point(new, "recv", fn, (), {}, plain_of)
    with pytest.raises(prologue.ReplayError, match="rank 1 logged no such message"):
        p2p.point_to_point(new, "recv", fn, (None, 1, 5), {}, plain_of)
    p2p.point_to_point(survivor, "Isend", fn, (np.full(2, 4.0), 2), {"tag": 8}, plain_of)
    new.p2p.stage([survivor.p2p.offers(1, {2}), []], 2, [2, 0])
    new.p2p.adopt(True)
    ghost = np.zeros(2)
    req = p2p.point_to_point(new, "Irecv", fn, (ghost, 1, 8), {}, plain_of)
    assert ghost.tolist() == [4.0, 4.0] and req == MPI.REQUEST_NULL  # (answered at once, complete)
    assert p2p.point_to_point(new, "isend", fn, ("z", 1), {}, plain_of) == MPI.REQUEST_NULL
    with pytest.raises(prologue.ReplayError, match="lower-case irecv"):
        p2p.point_to_point(new, "irecv", fn, (None, 1, 8), {}, plain_of)
    new.between, new.target = True, 1  # (its survivors failed in this part: a message may be in flight)
    with pytest.raises(prologue.ReplayError, match="may not have been received"):
        p2p.point_to_point(new, "send", fn, ("y", 1), {}, plain_of)


def test_a_replacement_call_the_record_cannot_answer_raises_instead_of_hanging(monkeypatch):
    import numpy as np
    from mpi4py import MPI

    prologue, mine = _prologue_with(monkeypatch)
    mine.record("bcast", ("x",), {"root": 1}, "x")
    mine.record("Bcast", (np.zeros(4),), {}, None)
    gaps = MPI.DOUBLE.Create_resized(0, 16)  # (a datatype with gaps: not recorded, said why)
    mine.record("Bcast", ([np.zeros(4), 2, gaps],), {}, None)
    gaps.Free()
    mine.close()
    new = prologue.Prologue()
    new.adopt(mine.handover())
    with pytest.raises(prologue.ReplayError, match=r"bcast\(root=1\)"):  # another root
        new.replay("bcast", ("x",), {"root": 0})
    assert new.replay("bcast", ("x", 1), {}) == "x"
    with pytest.raises(prologue.ReplayError, match="holds 16 bytes, the survivors' 32"):
        new.replay("Bcast", (np.zeros(2),), {})
    new.replay("Bcast", (np.zeros(4),), {})
    with pytest.raises(prologue.ReplayError, match="could not be recorded"):
        new.replay("Bcast", (np.zeros(4),), {})
    for op in ("send", "Recv", "Scatterv", "Iallreduce", "Reduce_scatter"):
        with pytest.raises(prologue.ReplayError, match="The survivors are recovering"):
            new.replay(op, (), {})
    assert prologue.REPLAYABLE.isdisjoint(prologue.NEEDS_PEERS)
    # guarded: a derived communicator's collective is refused on a replacement; the survivors'
    # wrapper records on the communicator dpmpi.init() returned and warns (rank 0) otherwise
    calls = []
    derived = prologue.guarded(new, "bcast", lambda *a: calls.append(a), True, lambda: None)
    with pytest.raises(prologue.ReplayError, match="derived communicator"):
        derived("x")
    assert calls == []


def test_a_replacement_answers_its_prologues_calls_on_derived_communicators_from_its_groups_survivor():
    """Collectives on derived communicators in the prologue (prologue_derived.py): each survivor
    records its own groups' results; the lowest surviving member of each group a replacement
    belongs to brings its record to the repair; the replacement answers its calls on that group in
    order, per segment, and makes them for real where every member is a replacement of the same
    repair (a communicator of one rank, a pair that died whole). Before: ReplayError for any."""
    import numpy as np

    from dpmpi.resilient import prologue, prologue_derived as pd

    group = (0, 1)  # pair 0 of ranks 0-3, the derived communicator at place 2
    survivor = prologue.Prologue()
    at = pd.Where(2, lambda: group)
    bcast = prologue.guarded(survivor, "Bcast", lambda buf, root=0: buf.__setitem__(slice(None), 7.0), True,
                             lambda: None, where=lambda: at)
    allreduce = prologue.guarded(survivor, "allreduce", lambda obj, op=None: obj * 2, True, lambda: None,
                                 where=lambda: at)
    sendrecv = prologue.guarded(survivor, "sendrecv", lambda obj: obj, True, lambda: None, where=lambda: at)
    w = np.zeros(3)
    bcast(w, root=0)
    assert allreduce(5) == 10 and sendrecv(1) == 1
    survivor.run_begins()
    survivor.run_ends()
    assert allreduce(6) == 12  # (between run 1 and run 2: segment 1)
    assert list(survivor.refused) == ["a derived communicator's sendrecv()"]  # (not recorded: refused, warned)
    assert sorted(survivor.derived.records) == [2] and survivor.derived.records[2][0] == group
    # the repair: rank 0 died; survivor 1 is the pair's lowest survivor, rank 3 is not a member
    offered = pd.offers(survivor.derived.records, 1, {0}, {0})
    assert [o.place for o in offered] == [2] and pd.offers(survivor.derived.records, 3, {0}, {0}) == []
    assert pd.offers(survivor.derived.records, 1, {2}, {2}) == []  # (no replacement in this group)
    replacement = prologue.Prologue()
    replacement.derived.stage([[], offered, []], 0, [0])
    replacement.derived.remap([0, 1, 2], {0: 0, 1: 1, 2: 2, 3: 3})
    replacement.adopt(survivor.handover())
    assert replacement.derived.records[2][1][0].op == "Bcast" and replacement.derived.staged is None

    def made(*a, **k):
        raise AssertionError("made for real: the survivors would never join")
    r_bcast = prologue.guarded(replacement, "Bcast", made, True, lambda: None, where=lambda: at)
    r_allreduce = prologue.guarded(replacement, "allreduce", made, True, lambda: None, where=lambda: at)
    with pytest.raises(prologue.ReplayError, match=r"its surviving members' call there was Bcast\(root=0\)"):
        r_allreduce(5)
    mine = np.zeros(3)
    r_bcast(mine, root=0)
    assert mine.tolist() == [7.0] * 3 and r_allreduce(5) == 10
    with pytest.raises(prologue.ReplayError, match=r"made 2 call\(s\) on it before the first run and this is one more"):
        r_allreduce(5)  # (a third call before the first run: the survivors made two)
    replacement.run_begins()
    replacement.run_ends()
    assert r_allreduce(6) == 12  # (segment 1, after the first run it skipped)
    # a communicator of one rank, or a group whose every member is a replacement of this repair:
    # made for real, and recorded for later replacements
    whole = prologue.Prologue()
    whole.derived.stage([[]], 0, [0, 1])
    whole.adopt(survivor.handover())
    real = prologue.guarded(whole, "allreduce", lambda obj, op=None: obj + 1, True, lambda: None,
                            where=lambda: pd.Where(5, lambda: (0, 1)))
    assert real(1) == 2 and whole.derived.records[5][1][0].op == "allreduce"
    other = prologue.guarded(whole, "allreduce", made, True, lambda: None, where=lambda: pd.Where(6, lambda: (0, 2)))
    with pytest.raises(prologue.ReplayError, match="its surviving members made no call on it"):
        other(1)
    # survivors that failed outside the runs (a death in their prologue, the Runtime made first):
    # the replacement's first call past a group's record is the one they make again with it, and
    # so are its later calls on that group (before that, calls are answered); another group's
    # calls are still answered from its record, whose survivor went further (two members of
    # different groups died: the groups' survivors stood at different calls). Before the
    # forty-second session the first call past a record ended the whole replay, and the
    # replacement made the other group's next call for real (a hang).
    handed = list(survivor.handover())
    handed[2:5] = [0, 0, True]  # (run 0, between: repaired in the prologue)
    late = prologue.Prologue()
    ahead = pd.Where(9, lambda: (0, 2))
    late.derived.stage([offered, [pd.Offer(9, (0, 2), offered[0].entries)]], 0, [0])
    late.adopt(tuple(handed))
    assert late.replaying is not None and late.replay_derived(at, "Bcast", (np.zeros(3),), {}) is None
    assert late.replay_derived(at, "allreduce", (5,), {}) == 10 and late.replaying is not None
    assert late.replay_derived(at, "allreduce", (5,), {}) is prologue.REAL and late.replaying is not None
    assert late.replay_derived(at, "allreduce", (5,), {}) is prologue.REAL  # (its later calls on it too)
    assert late.replay_derived(ahead, "Bcast", (np.zeros(3),), {}) is None
    assert late.replay_derived(ahead, "allreduce", (5,), {}) == 10
    assert late.replay_derived(ahead, "allreduce", (5,), {}) is prologue.REAL and late.derived.live == {2, 9}
    late.run_begins()
    assert late.replaying is None  # (the replay ends where the survivors' run begins)
    # a repair that drops places and renumbers ranks moves the records with them
    moved = pd.remapped({2: ((0, 1, 3), []), 4: ((2, 3), [])}, [0, 2, 3], {0: 0, 1: 1, 3: 2})
    assert moved == {1: ((0, 1, 2), [])}
    # a program without snapshots records for ever: the derived calls count against the prologue's cap
    capped = prologue.Prologue()
    capped.derived.count = prologue.MAX_CALLS - 1
    capped.record_derived(at, "allreduce", (1,), {}, 2)
    assert capped.full and not capped.recording
    # a replacement whose prologue does not replay (handed nothing) keeps no staged record
    none = prologue.Prologue()
    none.derived.stage([offered], 0, [0])
    none.adopt(None)
    assert not none.derived and none.derived.staged is None


def test_a_derived_call_whose_agreement_a_repair_cut_short_is_made_again_only_where_it_failed_everywhere():
    """between_runs with an outcome (a prologue call on a derived communicator, the Runtime made first):
    its members' agreement gives up when a repair begins; a member whose call had succeeded then
    learns after the repair how the agreement ended (the repair closed it), and makes the call
    again only if some member's failed, as the members that saw it end decide (before, it always
    made it again while its partner went on: a hang)."""
    from dpmpi.errors import ProcFailedError, RevokedError
    from dpmpi.resilient.prologue_calls import between_runs

    def run(make, agree, ended):
        log = []

        def gave_up(flag):
            log.append(("agree", flag))
            return agree(flag)
        out = between_runs("allreduce", make, (5,), {}, gave_up,
                           lambda exc: log.append(("recover", type(exc).__name__)),
                           lambda: (lambda v: log.append("again") or v * 3), lambda: log.append("outcome") or ended)
        return out, log

    def revoked(flag):
        raise RevokedError("a repair began", 77)

    def failed():
        raise ProcFailedError("a peer died", 75)
    assert run(lambda: 10, lambda flag: flag, False) == ((10, False), [("agree", 1)])
    # gave up after a successful call: the agreement ended with every flag set -> no second call
    assert run(lambda: 10, revoked, True) == ((10, False), [("agree", 1), ("recover", "RevokedError"), "outcome"])
    # ... or with a member's 0 (one that had not entered it, or whose call failed) -> made again
    assert run(lambda: 10, revoked, False) == ((15, True), [("agree", 1), ("recover", "RevokedError"), "outcome",
                                                            "again"])
    # its own call failed: made again, whatever the agreement (not asked)
    assert run(failed, revoked, True) == ((15, True), [("agree", 0), ("recover", "RevokedError"), "again"])
    assert run(failed, lambda flag: flag, True)[0] == (15, True)
    assert run(lambda: 10, lambda flag: 0, True) == ((15, True), [("agree", 1), ("recover", "ProcFailedError"),
                                                                   "again"])


def test_a_replacement_gets_its_part_of_a_prologue_scatter_and_passes_a_gather_to_another_root(monkeypatch):
    """Rooted collectives in the prologue: the root records its whole scatter input, so a
    replacement of another rank gets its part from the root's record (the one handed over: the
    lowest surviving rank's), and a replacement of the root takes its part of its own input; a
    gather needs nothing on a rank that is not its root. What cannot be redone raises."""
    import numpy as np

    prologue, root = _prologue_with(monkeypatch)
    other = prologue.Prologue()
    data = np.arange(12, dtype=np.int32)  # 4 ranks, 3 each
    for rec, rank in ((root, 0), (other, 2)):
        got = data[3 * rank:3 * rank + 3].copy()
        rec.record("Scatter", (data if rank == 0 else None, got, 0), {}, None, rank)
        rec.record("scatter", (["a", "b", "c", "d"] if rank == 0 else None,), {"root": 0}, "abcd"[rank], rank)
        rec.record("gather", (rank,), {"root": 0}, [0, 1, 2, 3] if rank == 0 else None, rank)
        rec.record("Gather", (got, None), {"root": 0}, None, rank)
        rec.close()
    assert len(root.handover()[0][0].payload) == data.nbytes and other.handover()[0][0].payload is None

    new = prologue.Prologue()  # replaces rank 3, handed rank 0's record
    new.adopt(root.handover())
    part = np.zeros(3, dtype=np.int32)
    assert new.replay("Scatter", (None, part), {"root": 0}, rank=3) is None and part.tolist() == [9, 10, 11]
    assert new.replay("scatter", (None,), {"root": 0}, rank=3) == "d"
    assert new.replay("gather", (3,), {"root": 0}, rank=3) is None
    assert new.replay("Gather", (part, None), {"root": 0}, rank=3) is None
    assert new.replaying == 4

    mine = prologue.Prologue()  # replaces the root (rank 0), handed rank 2's record
    mine.adopt(other.handover())
    part = np.zeros(3, dtype=np.int32)
    mine.replay("Scatter", (data, part, 0), {}, rank=0)
    assert part.tolist() == [0, 1, 2] and mine.replay("scatter", (["a", "b", "c", "d"],), {"root": 0}, rank=0) == "a"
    # it keeps the root's record of them: as the lowest surviving rank of a later repair, it hands the parts over
    assert mine.entries[0].payload == data.tobytes() and mine.entries[1].payload is not None
    with pytest.raises(prologue.ReplayError, match=r"gather\(root=0\).*replaces the root"):
        mine.replay("gather", (0,), {"root": 0}, rank=0)

    lost = prologue.Prologue()  # replaces rank 1, handed rank 2's record: the root's parts are not in it
    lost.adopt(other.handover())
    with pytest.raises(prologue.ReplayError, match=r"rank 0\), which was not the one handed over"):
        lost.replay("Scatter", (None, np.zeros(3, dtype=np.int32)), {"root": 0}, rank=1)
    short = prologue.Prologue()
    short.adopt(root.handover())
    with pytest.raises(prologue.ReplayError, match="holds 8 bytes, the survivors' 12"):
        short.replay("Scatter", (None, np.zeros(2, dtype=np.int32)), {"root": 0}, rank=1)


def test_a_replacement_redoes_a_scatter_gather_and_reduce_on_a_derived_communicator_from_its_groups_record():
    """Rooted collectives on a derived communicator in the prologue (prologue_derived.py, since
    the forty-third session; before, ReplayError on the replacement and the job went on without
    it): a scatter's root records its whole input; a gather or reduce is made, then its root's
    result is broadcast to the members (every member records it). A replacement answers from the
    handed record: its part of the root's scatter, the result of a gather or Reduce rooted at it,
    None elsewhere; the root's replacement takes its part of its own input; a scatter whose root's
    record was not handed over raises, naming why. Since the forty-fifth session a scatter is
    followed by an allgather of every member's part (each up to 1 MiB), so that any record
    answers it (``small``; else, parts too large, as before)."""
    import numpy as np
    from mpi4py import MPI

    from dpmpi.resilient import prologue, prologue_derived as pd

    group = (0, 1, 2)  # a derived communicator at place 3; its ranks are the logical ones here
    at = pd.Where(3, lambda: group)
    data = np.arange(9, dtype=np.int32)

    parts = {"Scatter": [data[3 * q:3 * q + 3].tobytes() for q in range(3)],
             "scatter": [MPI.pickle.dumps(c) for c in "xyz"]}

    def survivor(rank, small=False):  # the calls as rank ``rank`` of the group makes them in its prologue
        rec, told, shared = prologue.Prologue(), [], []

        def plain_of(name):  # (the communicator's plain bcast: the root's result, as the root sent it)
            if name == "allgather":  # (every member's part of a scatter: None, over 1 MiB, unless small)
                return lambda mine: shared.append(mine) or [p if small else None for p in parts[shared_op[0]]]
            assert name == "bcast"
            return lambda obj, root: told.append((obj, root)) or (
                MPI.pickle.dumps([0, 10, 20]) if len(told) == 1 else np.array([3.0, 6.0]).tobytes())
        shared_op = [""]

        def made(op):
            def fn(*a, **k):
                if op == "Scatter":
                    a[1][:] = data[3 * rank:3 * rank + 3]
                if op == "gather":
                    return [0, 10, 20] if rank == 1 else None
                if op == "Reduce" and rank == 1:
                    a[1][:] = [3.0, 6.0]
                return {"scatter": "xyz"[rank]}.get(op)
            return fn

        def call(name, *a, **k):
            shared_op[0] = name
            return prologue.guarded(rec, name, made(name), True, lambda: None, lambda: rank, plain_of,
                                    where=lambda: at)(*a, **k)
        part, total = np.zeros(3, dtype=np.int32), np.zeros(2)
        call("Scatter", data if rank == 0 else None, part, 0)
        got = call("scatter", list("xyz") if rank == 0 else None, root=0)
        gathered = call("gather", 10 * rank, root=1)
        call("Reduce", np.array([1.0, 2.0]), total, op=MPI.SUM, root=1)
        assert got == "xyz"[rank] and gathered == ([0, 10, 20] if rank == 1 else None)
        assert [t[1] for t in told] == [1, 1] and (told[0][0] is None) == (rank != 1)  # (the root tells)
        assert shared == [parts["Scatter"][rank], parts["scatter"][rank]]  # (every member tells its part)
        assert rec.refused == {}  # (nothing a replacement could not redo: no warning)
        rec.close()  # (its first snapshot operation)
        return rec

    def replacement(rank, handed_by, failed):
        rec = prologue.Prologue()
        rec.derived.stage([pd.offers(handed_by.derived.records, min(set(group) - failed), failed, failed)],
                          rank, sorted(failed))
        rec.derived.remap([0, 1, 2, 3], {0: 0, 1: 1, 2: 2, 3: 3})
        rec.adopt(handed_by.handover())

        def made(*a, **k):
            raise AssertionError("made for real: the survivors would never join")

        def call(name, *a, **k):
            return prologue.guarded(rec, name, made, True, lambda: None, lambda: rank, lambda name: made,
                                    where=lambda: at)(*a, **k)
        call.rec = rec
        return call

    root = survivor(0)
    assert root.derived.records[3][1][0].payload == data.tobytes()  # (the root's whole input)
    # rank 1 died (the gather's and Reduce's root): its replacement answers from rank 0's record
    call = replacement(1, root, {1})
    part, total = np.zeros(3, dtype=np.int32), np.zeros(2)
    assert call("Scatter", None, part, 0) is None and part.tolist() == [3, 4, 5]
    assert call("scatter", None, root=0) == "y" and call("gather", 10, root=1) == [0, 10, 20]
    call("Reduce", np.array([1.0, 2.0]), total, op=MPI.SUM, root=1)
    assert total.tolist() == [3.0, 6.0]
    # rank 0 (the scatter's root) died: its replacement takes its part of its own input; the
    # record of rank 1 (the lowest survivor) answers the rest, and a gather not rooted at it is None
    second = survivor(1)
    call = replacement(0, second, {0})
    part = np.zeros(3, dtype=np.int32)
    call("Scatter", data, part, 0)
    assert part.tolist() == [0, 1, 2] and call("scatter", list("xyz"), root=0) == "x"
    assert call("gather", 0, root=1) is None
    # it keeps the root's record of its scatters: a later repair (rank 2 died) hands it over from it
    kept = call.rec.derived.records[3][1]
    assert kept[0].payload == data.tobytes() and MPI.pickle.loads(kept[1].payload) == list("xyz")
    call.rec.close()  # (its first snapshot operation)
    part = np.zeros(3, dtype=np.int32)
    later = replacement(2, call.rec, {2})
    assert later("Scatter", None, part, 0) is None and part.tolist() == [6, 7, 8]
    # ranks 0 and 2 died: rank 2's part of a large scatter was only in the dead root's record
    call = replacement(2, second, {0, 2})
    with pytest.raises(prologue.ReplayError, match=r"Scatter\(root=0\) on a derived communicator.*its root's record"):
        call("Scatter", None, np.zeros(3, dtype=np.int32), 0)
    # ...but every member's record holds the parts of a small one
    call = replacement(2, survivor(1, small=True), {0, 2})
    part = np.zeros(3, dtype=np.int32)
    assert call("Scatter", None, part, 0) is None and part.tolist() == [6, 7, 8]
    assert call("scatter", None, root=0) == "z"


def test_a_prologue_gather_or_reduce_has_its_roots_result_broadcast_so_that_its_replacement_gets_it(monkeypatch):
    """A gather or reduce in the prologue is made as asked, then its root's result is broadcast,
    pickled (the root decides: not past TOLD_MAX), and recorded on every rank: a replacement of
    the root gets it from any survivor's record; a rank that is not the root gets None as MPI
    says. Past MAX_CALLS calls, or once the prologue is over, only the plain call is made."""
    from mpi4py import MPI

    prologue, rec = _prologue_with(monkeypatch)
    made = []
    plain = lambda obj, root=0: made.append(("gather", obj)) or (["a", "b", "c"] if obj == "a" else None)  # noqa: E731
    told = lambda name: (lambda obj, root: made.append((name, obj, root)) or MPI.pickle.dumps(["a", "b", "c"]))  # noqa: E731
    gather = prologue.guarded(rec, "gather", plain, False, lambda: None, lambda: 2, told)
    assert gather("c", root=0) is None and made == [("gather", "c"), ("bcast", None, 0)]
    assert prologue.guarded(rec, "gather", plain, False, lambda: None, lambda: 0, told)("a") == ["a", "b", "c"]
    assert made[-1] == ("bcast", MPI.pickle.dumps(["a", "b", "c"]), 0)
    rec.close()
    assert gather("c") is None and made[-1] == ("gather", "c")  # (closed: the plain call)
    new = prologue.Prologue()
    new.adopt(rec.handover())
    assert new.replay("gather", ("a",), {"root": 0}, rank=0) == ["a", "b", "c"]  # the root's replacement
    assert new.replay("gather", ("a",), {}, rank=1) is None
    many = prologue.Prologue()
    many.seen = prologue.MAX_CALLS
    assert not many.tells()
    # reduce: the same, with the program's op
    rec2 = prologue.Prologue()
    sums = []
    reduce_ = lambda obj, op=None, root=0: sums.append((obj, op, root)) or 42  # noqa: E731
    told2 = lambda name: (lambda obj, root: MPI.pickle.dumps(42))  # noqa: E731
    assert prologue.guarded(rec2, "reduce", reduce_, False, lambda: None, lambda: 1, told2)(5, "MAX", 1) == 42
    assert sums == [(5, "MAX", 1)]
    rec2.close()
    again = prologue.Prologue()
    again.adopt(rec2.handover())
    assert again.replay("reduce", (5, "MAX", 1), {}, rank=1) == 42
    other = prologue.Prologue()
    other.adopt(rec2.handover())
    assert other.replay("reduce", (7,), {"root": 1}, rank=0) is None


def test_a_prologue_gather_or_reduce_of_buffers_has_its_roots_result_broadcast_into_every_record(monkeypatch):
    """A Gather or Reduce of buffers is made as asked, then its root's result is broadcast as bytes
    (the root decides what: None past TOLD_MAX), so that the root's replacement gets it from any
    record, written into its buffer; a rank that is not the root gets nothing, as MPI says."""
    import numpy as np

    prologue, rec = _prologue_with(monkeypatch)
    made = []
    result = np.array([3.0, 4.0])

    def reduce(sendbuf, recvbuf, op=None, root=0):
        made.append("Reduce")
        if recvbuf is not None:
            recvbuf[:] = result
    told = lambda name: (lambda obj, root: made.append((name, obj, root)) or result.tobytes())  # noqa: E731
    off_root = prologue.guarded(rec, "Reduce", reduce, False, lambda: None, lambda: 2, told)
    assert off_root(np.ones(2), None, None, 1) is None and made == ["Reduce", ("bcast", None, 1)]
    on_root = prologue.guarded(rec, "Reduce", reduce, False, lambda: None, lambda: 1, told)
    mine = np.zeros(2)
    assert on_root(np.ones(2), mine, None, 1) is None and made[-1] == ("bcast", result.tobytes(), 1)
    rec.close()
    new = prologue.Prologue()
    new.adopt(rec.handover())
    got = np.zeros(2)
    assert new.replay("Reduce", (np.ones(2), got, None, 1), {}, rank=2) is None and got.tolist() == [0, 0]
    assert new.replay("Reduce", (np.ones(2), got), {"root": 1}, rank=1) is None and got.tolist() == [3.0, 4.0]
    big = prologue.Prologue()
    big.adopt(([prologue.Entry("Gather", 0, -1, b"", "", 0)], False, 0, 1, False, False))
    with pytest.raises(prologue.ReplayError, match="over 16777216 bytes is not recorded"):
        big.replay("Gather", (np.ones(1), np.zeros(4)), {}, rank=0)


def test_a_replacement_counts_the_survivors_calls_once_its_replay_is_over(monkeypatch):
    """Whether a gather is made as an allgather depends on the calls counted so far, which must
    be the same on every rank: a replacement whose replay ends takes the survivors' count, even
    when their record stopped at its limit before (it then holds fewer entries than calls)."""
    prologue, mine = _prologue_with(monkeypatch, limit=100)
    bcast = prologue.guarded(mine, "bcast", lambda obj, root=0: obj, False, lambda: None)
    mine.run_begins()
    mine.run_ends()
    for i in range(5):
        bcast("x" * 40)  # (the second passes the 100-byte limit: recording stops, counting goes on)
    mine.run_begins()
    assert mine.full and len(mine.entries) == 1 and mine.seen == 5
    new = prologue.Prologue()
    new.adopt(mine.handover())
    new.run_begins()
    new.run_ends()
    assert new.replaying is not None and new.seen == 0
    new.run_begins()  # (the run its survivors are in: the replay is over)
    assert new.replaying is None and new.seen == 5


def test_a_call_between_two_runs_is_left_together_and_made_again_after_a_repair(monkeypatch):
    """Between two dpmpi.Runtime runs a replayable call is followed by an agreement (uniform: a
    rank whose call completed learns there that a peer's failed); on a failure the Runtime repairs
    and restores (``recover``) and the call is made again through the repaired communicator's
    wrapper (an in-place Allreduce with its input as it was). A replacement handed such a record
    restores at the end of the survivors' last run, answers what came before from the record and
    makes the interrupted call with them."""
    import numpy as np
    from mpi4py import MPI

    from dpmpi.errors import ProcFailedError

    prologue, rec = _prologue_with(monkeypatch)
    rec.run_begins()
    rec.run_ends()
    events = []
    rec.recover = lambda exc: events.append(("recover", type(exc).__name__))
    agree = lambda flag: events.append(("agree", flag)) or flag  # noqa: E731
    buf = np.array([1.0, 2.0])

    def failing(_sendbuf, recvbuf):
        recvbuf[:] = -1  # (a call a failure cut short may have written its buffer)
        raise ProcFailedError("a peer died", MPI.ERR_PROC_FAILED)

    again = lambda: (lambda _s, b: events.append(("again", b.tolist())) or "again")  # noqa: E731
    call = prologue.guarded(rec, "Allreduce", failing, False, lambda: None, lambda: 0, lambda name: agree, again)
    assert call(MPI.IN_PLACE, buf) == "again"
    assert events == [("agree", 0), ("recover", "ProcFailedError"), ("again", [1.0, 2.0])]
    ok = prologue.guarded(rec, "allreduce", lambda obj: obj * 4, False, lambda: None, lambda: 0,
                          lambda name: agree, again)
    assert ok(3) == 12 and events[-1] == ("agree", 1) and rec.entries[-1].op == "allreduce"
    rec.run_begins()  # (a failure now, between runs 1 and 2, is handed over as "between")
    rec.run_ends()
    handed = rec.handover()
    assert handed[2:] == (3, rec.seen, True, False)

    new = prologue.Prologue()
    new.adopt(handed)
    new.run_begins()
    assert new.finished_by_survivors() and not new.restores()  # (run 1: skipped, no restore)
    new.run_ends()
    assert new.replay("allreduce", (3,), {}) == 12  # (between runs 1 and 2: from the record)
    new.run_begins()
    assert new.finished_by_survivors() and new.restores()  # (run 2: skipped, restored at its end)
    new.run_ends()
    assert new.replay("bcast", ("x",), {}) is prologue.REAL and new.replaying is None and new.seen == rec.seen


def test_a_retaken_first_snapshot_is_handed_as_a_failure_between_the_runs(monkeypatch):
    """A survivor whose later Runtime retakes its first snapshot (dpmpi.runtime._retake_start)
    hands the run it is in as the next one after a failure between the runs, and says so; the
    replacement restores at the end of the run before, then joins the retake's restore in that
    run, once. A replacement still replaying hands what it was handed: where the survivors are
    (before the fifty-second session its own place: the next replacement ran a finished run)."""
    prologue, rec = _prologue_with(monkeypatch)
    rec.run_begins()
    rec.run_ends()
    assert rec.handover()[2:] == (2, 0, True, False)  # (between runs 1 and 2)
    rec.run_begins()  # (run 2: its first snapshot failed)
    assert rec.handover()[2:] == (2, 0, False, False)
    rec.retaking = True
    handed = rec.handover()
    assert handed[2:] == (2, 0, True, True)

    new = prologue.Prologue()
    new.adopt(handed)
    new.run_begins()
    assert new.finished_by_survivors() and new.restores() and not new.retakes()  # (run 1: restored at its end)
    assert new.handover() == handed  # (replaying: what it was handed)
    new.restoring()
    new.run_ends()
    new.run_begins()
    assert not new.finished_by_survivors() and not new.restores() and new.retakes() and not new.retakes()
    assert new.replaying is None and new.handover()[2:] == (2, 0, False, False)  # (now where the survivors are)


def test_a_communicator_made_between_runs_is_agreed_on_and_on_a_failure_made_again_by_every_rank(monkeypatch):
    """Outside dpmpi.Runtime's runs (a Runtime made) a derived communicator's creation is followed
    by an agreement; on a failure, where the creation had completed its result is let go of
    before the repair (so that no rank holds it, the repair forgets it everywhere and every rank
    makes it again; held on some ranks only, it would be rebuilt there and made anew elsewhere),
    then the creation is made again. Inside a run, or with no Runtime, nothing is agreed."""
    import gc
    import weakref

    from mpi4py import MPI

    from dpmpi.errors import ProcFailedError

    prologue, rec = _prologue_with(monkeypatch)
    assert rec.watches_creation() is None  # (no Runtime)
    events, alive = [], []

    class Made:  # (a handle: held while a reference lives)
        pass

    def recover(exc):
        gc.collect()
        events.append(("recover", type(exc).__name__, [r() is not None for r in alive]))
    rec.recover = recover
    assert rec.watches_creation() is recover

    def made():
        handle = Made()
        alive.append(weakref.ref(handle))
        return handle
    agree = lambda flag: events.append(("agree", flag)) or 0  # noqa: E731  (a peer's creation failed)
    out = prologue.creation_between_runs("Split", made, agree, recover, lambda: "again",
                                         lambda: events.append(("let go",)))
    assert out == "again" and events == [("agree", 1), ("let go",), ("recover", "ProcFailedError", [False])]

    def failing():
        raise ProcFailedError("a peer died", MPI.ERR_PROC_FAILED)
    events.clear()
    out = prologue.creation_between_runs("Dup", failing, lambda flag: events.append(("agree", flag)) or flag,
                                         recover, lambda: "again")
    assert out == "again" and events == [("agree", 0), ("recover", "ProcFailedError", [False])]
    keep = prologue.creation_between_runs("Dup", made, lambda flag: flag, recover, lambda: "again")
    assert isinstance(keep, Made) and len(events) == 2  # (every rank made it: no repair)
    rec.run_begins()
    assert rec.watches_creation() is None  # (inside a run: the step's failure is the Runtime's)
    rec.run_ends()
    assert rec.watches_creation() is recover


def test_a_communicator_made_outside_the_runs_is_kept_for_replacements_even_once_freed():
    """A replacement makes again what the program made outside dpmpi.Runtime's runs (its prologue,
    between runs), freed or not: every repair keeps those (``holding.held``) once a Runtime covers
    the prologue (made before or after them); one made inside a run is not kept once freed; a
    program without a Runtime keeps those made in its prologue once that closed (its first
    snapshot: a replacement makes them again before it restores; a node-local Split_type made
    there and freed hung its replacement before the thirty-ninth session), not before (a program
    without snapshots would keep every communicator it made)."""
    from mpi4py import MPI

    from dpmpi.resilient import holding, prologue
    from dpmpi.resilient.plan import Recipe
    from dpmpi.resilient.state import State

    st = State.__new__(State)  # (only what held() reads)
    st.prologue, st.pinned = prologue.Prologue(), set()
    st.recipes = [Recipe("Split_type", -1, {0: (MPI.COMM_TYPE_SHARED, 0)}), Recipe("Dup", -1, {})]
    st.derived, st.handles = [MPI.COMM_NULL, MPI.COMM_NULL], [None, None]  # (both freed by the program)
    holding.pin_if_outside_runs(st, 0)  # made in the prologue
    assert holding.held(st) == [0, 0]  # (no Runtime, no snapshot yet)
    st.prologue.close()
    assert holding.held(st) == [holding.PINNED, 0]  # (the first snapshot of a program of dpmpi's primitives)
    st.prologue.closed = False
    st.prologue.recover = lambda exc: None  # (a dpmpi.Runtime made)
    assert holding.held(st) == [holding.PINNED, 0]
    st.prologue.run_begins()
    holding.pin_if_outside_runs(st, 1)  # made in a step
    assert holding.held(st) == [holding.PINNED, 0] and st.pinned == {0}
    st.prologue.run_ends()
    holding.pin_if_outside_runs(st, 1)  # made between two runs
    assert holding.held(st) == [holding.PINNED, holding.PINNED]


def test_a_replacement_remakes_its_survivors_setup_outside_its_runs_and_in_its_prologue():
    """A replacement matches its calls outside the runs against the pinned communicators where its
    survivors had a dpmpi.Runtime (in or past a run, or in their prologue with one made), and, in
    a program of dpmpi's primitives, in its prologue (the survivors' record closed: they pinned
    what they made in theirs); not inside a run, nor after its own first snapshot, nor when it was
    handed no record (its survivors had no snapshot yet: their calls and its own are made together)."""
    from dpmpi.resilient import prologue

    for handed in [([], False, 0, 0, False, False),  # primitives: the prologue closed, no runs
                   ([], False, 2, 0, False, False),  # inside run 2
                   ([], False, 0, 0, True, False),  # in the prologue, a Runtime made
                   ([], False, 3, 0, True, False)]:  # between runs 2 and 3
        new = prologue.Prologue()
        new.adopt(handed)
        assert new.remakes_survivors_setup(), handed
        if handed[2] == 0 and not handed[4]:
            new.close()  # (its restore)
        else:
            new.run_begins()  # (inside a run: its steps' calls)
        assert not new.remakes_survivors_setup(), handed
    new = prologue.Prologue()
    new.adopt(None)
    assert not new.remakes_survivors_setup()


def _setup_state(calls=3):
    import types

    from dpmpi.resilient import prologue, setup

    listeners = types.SimpleNamespace(items=[], snapshot=lambda: list(listeners.items))
    repaired = []
    watcher = object()  # (dpmpi's failure watcher, a listener that is not the program's)
    listeners.items.append(watcher)
    revoked = types.SimpleNamespace(handle=0, Revoke=lambda: repaired.append("revoke"))  # (ctxcomms.revoke's)
    active = types.SimpleNamespace(Respawn=lambda: repaired.append(1), mpi=revoked, Agree=None)
    state = types.SimpleNamespace(prologue=prologue.Prologue(), callbacks=[], listeners=listeners, process_id=0,
                                  active=active, watcher=watcher)
    state.prologue.setup = setup.SetupWatch(state, calls)
    return state, repaired


def _agree(state, peers, creation=False):
    """The watch's agreement, the others' bits ANDed in by ``peers`` (dpmpi's Agree in a job)."""
    state.active.Agree = peers
    return state.prologue.setup.agree(creation=creation)


def test_the_setup_is_watched_for_its_first_calls_until_a_runtime_or_a_snapshot_and_ends_where_any_rank_is_unclean():
    """dpmpi.init's watch of the setup (dpmpi.resilient.setup): a failure in the first
    DPMPI_SETUP_WATCH replayable calls is repaired by it, while no Runtime, no snapshot operation
    and no run exists; its agreement ANDs each rank's "a replacement could redo my calls" bit, and
    where any rank's is clear (here: a peer's, or this rank's repair callback) it ends on every rank."""
    state, repaired = _setup_state(calls=3)
    p, watch = state.prologue, state.prologue.setup
    assert p.recovery() is watch and p.watches_creation() is watch and p.remade_outside_runs()
    p.seen = 4  # (past DPMPI_SETUP_WATCH calls)
    assert p.recovery() is None and p.handover() is None
    p.seen = 1
    rt = lambda exc: None  # noqa: E731 (a Runtime's recovery takes precedence)
    p.recover = rt
    assert p.recovery() is rt
    p.recover = None
    agree = _agree(state, lambda flag: flag & 3)  # (every rank clean)
    assert agree(1) == 1 and watch.on
    assert agree(0) == 0 and watch.on  # (a failure: not done, still watched)
    assert _agree(state, lambda flag: flag & 1)(1) == 1 and not watch.on  # (a peer is not clean)
    assert p.recovery() is None and p.handover() is None and not p.remade_outside_runs()
    state, _ = _setup_state()
    state.callbacks.append(print)  # (the program repairs by itself)
    assert _agree(state, lambda flag: flag)(1) == 1 and not state.prologue.setup.on
    state, _ = _setup_state()
    watch = state.prologue.setup
    assert _agree(state, lambda flag: flag & 1)(0) == 0 and watch.on  # (failed: repaired as watched before it)
    assert _agree(state, lambda flag: flag, creation=True)(1) == 1 and not watch.on  # (a derived communicator made)
    state, _ = _setup_state()
    state.listeners.items.append(object())  # (a listener of the program's)
    assert _agree(state, lambda flag: flag)(1) == 1 and not state.prologue.setup.on
    state, _ = _setup_state()
    state.prologue.refused["comm.sendrecv()"] = "prog.py:3"  # (a call no replacement could redo)
    _agree(state, lambda flag: flag)(1)
    assert not state.prologue.setup.on
    state, _ = _setup_state()
    state.prologue.close()  # (the first snapshot operation)
    assert state.prologue.recovery() is None


def test_the_setup_watch_hands_its_record_only_in_its_own_repair_and_a_replacement_follows_its_survivors():
    """In a repair the watch made, the survivors hand their record (run 0, between): the
    replacement answers its calls from it, keeps its own watch on, and its first snapshot
    operation says that nothing is to be restored (once). A repair the program made by itself
    (after a failure in a call not watched) ends the watch and hands nothing; a replacement
    handed nothing, or a record from a run, has its watch off (its calls are made with theirs)."""
    from dpmpi.resilient import setup

    state, repaired = _setup_state()
    p, watch = state.prologue, state.prologue.setup
    p.seen = 2
    seen = []
    state.active.Respawn = lambda: seen.append(p.handover())
    watch(RuntimeError("a peer failed"))
    assert seen == [([], False, 0, 2, True, False)] and watch.on and not watch.repairing
    assert p.handover() is None and not watch.on  # (the program's own Respawn, later)
    # a call no replacement could redo since the last agreement, then a death in the next watched
    # call (the agreement could not end the watch): the repair is the program's (by_program)
    state, _ = _setup_state()
    p, watch = state.prologue, state.prologue.setup
    p.refused["comm.sendrecv()"] = "prog.py:3"
    state.active.Respawn = lambda: seen.append((p.handover() is not None, setup.by_program(state)))
    watch(RuntimeError("a peer failed"))
    assert seen[-1] == (True, True)  # (the AND then overrules the handover: setup.overruled)
    state.callbacks.append(print)  # (a callback alone changes nothing a replacement redoes)
    p.refused.clear()
    watch.on = True
    watch(RuntimeError("a peer failed"))
    assert seen[-1] == (True, False)
    for handed, on in [(([], False, 0, 2, True, False), True), (None, False), (([], False, 2, 5, False, False), False)]:
        new, _ = _setup_state()
        new.prologue.setup = None
        setup.adopted(new, handed)
        assert new.prologue.setup.on is on, handed
        assert new.prologue.close() is on  # (its first restore: nothing to restore, where its survivors had none)
        assert new.prologue.close() is False


def test_a_replacement_of_a_rank_that_died_in_the_setup_restores_nothing_only_where_it_says_as_built():
    """Its restore (dpmpi.Snapshot, on the primitives) returns -1 without a collective when it
    passes as_built=True (the documented pattern: then it commits the first epoch with the
    survivors); without it the program would take -1 for an epoch, so it raises, saying what to do."""
    from dpmpi.snapshot import core
    from dpmpi.snapshot.errors import SnapshotLostError

    assert core._nothing_to_restore(True)["epoch"] == -1
    with pytest.raises(SnapshotLostError, match=r"restore\(carry=-1, as_built=True\)"):
        core._nothing_to_restore(False)


def test_the_prologue_record_stops_at_its_limit_and_a_replacement_is_told_there(monkeypatch):
    import numpy as np

    prologue, mine = _prologue_with(monkeypatch, limit=100)
    mine.record("Bcast", (np.zeros(8),), {}, None)  # 64 bytes
    mine.record("Bcast", (np.zeros(8),), {}, None)  # 128: over the limit, recording stops
    assert mine.full and not mine.recording and len(mine.entries) == 1
    mine.close()
    new = prologue.Prologue()
    new.adopt(mine.handover())
    new.replay("Bcast", (np.zeros(8),), {})
    with pytest.raises(prologue.ReplayError, match="DPMPI_PROLOGUE_MAX=100"):
        new.replay("Bcast", (np.zeros(8),), {})


def test_the_survivors_prologue_wrapper_records_warns_at_the_first_snapshot_and_steps_aside(monkeypatch):
    import warnings

    prologue, mine = _prologue_with(monkeypatch)
    settled = []
    bcast = prologue.guarded(mine, "bcast", lambda obj, root=0: obj, False, lambda: settled.append(1))
    send = prologue.guarded(mine, "send", lambda obj, dest: None, False, lambda: None)
    assert bcast({"a": 1}) == {"a": 1}
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        send(1, dest=1)
        send(2, dest=1)
        assert seen == []  # (a program that never snapshots is never told: its replacements do not replay)
        mine.close(tell=True)
    assert len(seen) == 1 and "made comm.send() at " in str(seen[0].message), [str(w.message) for w in seen]
    assert "test_logic.py" in str(seen[0].message)  # where the program made it
    assert [e.op for e in mine.entries] == ["bcast"]
    assert bcast(5) == 5 and settled == [1]  # over: the plain method takes the wrapper's place
    assert len(mine.entries) == 1
    many = prologue.Prologue()  # a program without snapshots: recording stops after MAX_CALLS calls
    for i in range(prologue.MAX_CALLS + 5):
        many.record("allreduce", (i,), {}, i)
    assert many.full and len(many.entries) == prologue.MAX_CALLS
    epochs = prologue.Prologue()  # a Runtime program: its evaluations between runs are kept for longer
    epochs.run_begins()
    epochs.run_ends()
    for i in range(prologue.MAX_CALLS + 5):
        epochs.record("allreduce", (i,), {}, i)
    assert not epochs.full and len(epochs.entries) == prologue.MAX_CALLS + 5


def test_a_replacement_takes_the_prologue_record_from_any_active_rank():
    from dpmpi.resilient.plan import Plan, View, handed_prologue

    plan = Plan(1, (0, 1), (2,), 3)
    assert handed_prologue([View(2, plan, None), View(0, plan, [], None)]) is None
    rec = ([("bcast", 0, -1, b"x", "")], False)
    assert handed_prologue([View(2, plan, None), View(1, plan, [], rec), View(0, plan, [], rec)]) == rec


def test_a_prologue_wrapper_neither_keeps_its_communicator_alive_nor_stays_after_the_prologue():
    """A derived communicator the program drops must die at once (a repair treats a live handle as
    in use and rebuilds it: a wrapper that held its owner made a dropped per-step communicator
    look alive, and the job hung). Once the prologue is over the plain method is cached again."""
    import gc
    import weakref

    from dpmpi.resilient import prologue

    class Owner:
        pass

    def plain(x):
        return x

    rec = prologue.Prologue()
    owner = Owner()
    owner.__dict__["bcast"] = prologue.cached(owner, "bcast", plain, rec, False)
    assert owner.bcast(3) == 3 and owner.__dict__["bcast"] is not plain  # (the prologue runs: recorded)
    rec.close()
    assert owner.bcast(4) == 4 and owner.__dict__["bcast"] is plain
    owner.__dict__["bcast"] = prologue.cached(owner, "bcast", plain, rec, False)
    ref = weakref.ref(owner)
    gc.disable()
    try:
        del owner
        assert ref() is None  # freed by its reference count alone
    finally:
        gc.enable()


def test_a_replacement_skips_the_runs_its_survivors_finished_and_replays_what_lies_between(monkeypatch):
    """dpmpi.Runtime programs that call rt.run per epoch with an evaluation between: the survivors
    record outside their runs (not inside); a replacement whose survivors are in their third run
    returns at once from its first two (after its restore) and gets the evaluations' results."""
    prologue, mine = _prologue_with(monkeypatch)
    mine.record("bcast", ("cfg",), {}, "cfg")
    for k in (1, 2, 3):
        mine.run_begins()
        assert not mine.recording and not mine.finished_by_survivors()
        mine.close()  # (the Runtime's snapshot operations: the record stays open)
        mine.run_ends()
        if k < 3:
            mine.record("allreduce", (k,), {}, 10 * k)
    mine.run_begins()  # the fourth run, in which a rank dies
    handed = mine.handover()
    assert [(e.op, e.segment) for e in handed[0]] == [("bcast", 0), ("allreduce", 1), ("allreduce", 2)]
    assert handed[2] == 4

    new = prologue.Prologue()
    new.adopt(handed)
    assert new.replay("bcast", (None,), {}) == "cfg"
    for _k, want in ((1, 10), (2, 20), (3, None)):
        new.run_begins()
        assert new.finished_by_survivors()  # (its restore happens in the first: then it returns)
        new.run_ends()
        if want is not None:
            assert new.replay("allreduce", (0,), {}) == want
        else:  # the survivors made nothing after their third run
            with pytest.raises(prologue.ReplayError):
                new.replay("allreduce", (0,), {})
    new.run_begins()
    assert not new.finished_by_survivors() and new.replaying is None  # in step with the survivors
    # a warm spare, called in inside its first run while the survivors are in it too
    warm = prologue.Prologue()
    warm.run_begins()
    warm.adopt(([prologue.Entry("bcast", 0, -1, b"", "", 0)], False, 1, 1, False, False))
    assert warm.replaying is None and not warm.finished_by_survivors()


from dpmpi.recovery import STALE_AFTER, Recovery, stale_loop  # noqa: E402


def _rec(failed_step, failed=(), error="RevokedError"):
    return Recovery(failed_step=failed_step, restored_epoch=failed_step, error=error, caught_at=0.0,
                    repaired_at=0.0, restored_at=0.0, resumed_at=0.0, repair={"failed": list(failed)})


def test_stale_loop_is_repairs_of_nothing_in_the_same_step_again_and_again():
    """The Runtime stops a loop of repairs (a step that fails on a communicator a repair replaced,
    with no process failed) only when each of the last STALE_AFTER recoveries repaired nothing in
    the same step; a repair that replaced a rank, a step that moved on, or a replacement's own
    record (no error caught) breaks the run."""
    first = _rec(19, failed=[1])
    stuck = [first] + [_rec(18)] * STALE_AFTER
    err = stale_loop(stuck)
    assert isinstance(err, RuntimeError) and f"step 18 failed {STALE_AFTER} times in a row" in str(err)
    assert not stale_loop(stuck[:-1])  # (one fewer: the next one may succeed)
    assert not stale_loop([first] + [_rec(18)] * (STALE_AFTER - 1) + [_rec(18, failed=[2])])
    assert not stale_loop([first] + [_rec(18)] * (STALE_AFTER - 1) + [_rec(25)])
    assert not stale_loop([_rec(18, error="")] + [_rec(18)] * (STALE_AFTER - 1))
    assert not stale_loop([])


def test_a_step_drawing_from_a_global_generator_not_in_the_state_is_warned_of_once():
    """numpy.random's global generator (seeded once, drawn in every step) is not restored by a
    recovery: a stranger's program ended with other results after a kill, exit code 0, no word.
    The Runtime (on the rank that tells) now warns once when one moved during one of a process's
    first updates; not when it is given as state, nor when no step draws from it."""
    import random
    import warnings

    import numpy as np

    from dpmpi import rngwatch

    w = np.zeros(3)
    watch = rngwatch.GlobalDraws({"w": w}, tell=True)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        watch.after_update(0)  # (nothing drawn)
        np.random.rand(2)
        watch.after_update(1)
        np.random.rand(2)
        random.random()
        watch.after_update(2)  # (warned once already: no more looking)
    assert len(got) == 1 and "step 1 drew from numpy's global random generator" in str(got[0].message)
    assert "numpy.random.mtrand._rand" in str(got[0].message)
    quiet = [rngwatch.GlobalDraws({"w": w, "rng": np.random.mtrand._rand, "py": random._inst}, tell=True),
             rngwatch.GlobalDraws({"w": w}, tell=False)]
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        for k in range(rngwatch.CHECKED):
            for q in quiet:
                np.random.rand(2)
                random.random()
                q.after_update(k)
        idle = rngwatch.GlobalDraws({"w": w}, tell=True)
        for k in range(rngwatch.CHECKED):
            idle.after_update(k)
        np.random.rand(2)
        idle.after_update(rngwatch.CHECKED)  # (past the first CHECKED updates: no cost, no word)
    assert got == []
    py = rngwatch.GlobalDraws({"w": w, "rng": np.random.mtrand._rand}, tell=True)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        random.shuffle([1, 2, 3])
        py.after_update(5)
    said = str(got[0].message) if got else ""
    assert len(got) == 1 and "the random module's functions" in said and "random._inst" in said


def test_same_start_names_the_ranks_whose_starting_arrays_differ():
    from dpmpi import runtime_checks

    runtime_checks.same_start([5, 5, 5])
    with pytest.raises(ValueError, match=r"rank\(s\) \[1, 3\] differ from rank 0's"):
        runtime_checks.same_start([5, 6, 5, 7])
    with pytest.raises(ValueError, match=r"rank\(s\) \[0, 1\]"):  # (no epoch 0 held: never the same)
        runtime_checks.same_start([None, None])


def test_a_dead_processs_group_is_ended_only_where_its_pid_names_no_other_process():
    """dpmpi/resilient/orphans.py: which dead processes' groups a repair ends on this node."""
    from dpmpi.resilient.orphans import gone, on_my_node
    from dpmpi.watchplan import Ident

    def ident(pid, kernel="k1", ns=(1, 2), start=500):
        return Ident(kernel, ns, pid, start, True)

    procs = {0: ident(10), 1: ident(11), 2: ident(12, kernel="k2"), 3: ident(13, ns=(1, 3)), 4: ident(1)}
    assert on_my_node(procs, 0, [1, 2, 3, 4, 0, 9]) == [procs[1]]  # (not another node, namespace, pid 1, me)
    assert on_my_node({}, 0, [1]) == []

    def stat(state, start, comm="python"):
        rest = ["0"] * 18
        return f"11 ({comm}) {state} 1 11 11 " + " ".join(rest[:15]) + f" {start} 0 0\n"

    dead = ident(11, start=500)
    assert stat("Z", 500).split(") ")[1].split()[19] == "500"  # (field 22: the start time)
    assert gone(dead, None)  # no such pid: its group, if any, is the dead process's
    assert gone(dead, stat("Z", 500))  # its zombie
    assert gone(dead, stat("Z", 500, comm="a) b (c"))  # (a command name with parentheses)
    assert not gone(dead, stat("S", 500))  # still running
    assert not gone(dead, stat("Z", 900))  # another process that took the pid, now a zombie
    assert not gone(dead, stat("R", 900))
    assert not gone(dead, "garbage")


def _begin_rt(hold, restored):
    """A Runtime between two runs as ``dpmpi.runtime._begin`` reads it: at step 10, its arrays
    holding ``hold`` (the last run's end, or None after commit_at_end=False); its ``_recover``
    notes its bound and restores ``restored``."""
    from types import SimpleNamespace

    rt = SimpleNamespace(step=10, _unended=hold is None, _arrays_hold=hold, _pending=None,
                         snapshot=SimpleNamespace(epoch=20), bounds=[])

    def recover(caught, at_most=None):
        rt.bounds.append(at_most)
        rt._arrays_hold = restored
    rt._recover = recover
    return rt


def test_a_rank_that_left_the_run_start_agreement_as_a_repair_began_sets_no_bound(monkeypatch):
    """Rank 3 was still in the agreement that ends a run's start snapshot when rank 2, past it,
    died and the others began the repair; dpmpi's Agree gave up there (RevokedError). Before,
    rank 3 raised after a run with commit_at_end=False (the others: SnapshotLostError) or bounded
    the restore by the last run's end while the others restored the start (a hang): 3 of 50 runs
    under load. Now it sets no bound and goes on from the start where every rank restored it;
    a rank whose agreement failed still bounds the restore by the held end, or raises."""
    from dpmpi import runtime
    from dpmpi.errors import ProcFailedError, RevokedError

    def taken_with(exc):
        def taken(*args, **kwargs):
            raise exc
        return taken

    start = 21  # (epochs.run_start(10))
    monkeypatch.setattr(runtime, "_taken_together", taken_with(RevokedError("left", 77)))
    for hold in (20, None):
        rt = _begin_rt(hold, restored=start)
        runtime._begin(rt)
        assert rt.bounds == [None] and rt._arrays_hold == start, hold
    monkeypatch.setattr(runtime, "_taken_together", taken_with(ProcFailedError("failed", 75)))
    rt = _begin_rt(20, restored=20)
    calls = iter([ProcFailedError("failed", 75), None])

    def once_failed(*args, **kwargs):  # (fails, then the start is taken again after the repair)
        exc = next(calls)
        if exc is not None:
            raise exc
    monkeypatch.setattr(runtime, "_taken_together", once_failed)
    runtime._begin(rt)
    assert rt.bounds == [20] and rt._arrays_hold == start
    monkeypatch.setattr(runtime, "_taken_together", taken_with(ProcFailedError("failed", 75)))
    with pytest.raises(ProcFailedError):
        runtime._begin(_begin_rt(None, restored=start))  # (no held end: the program's)


def test_a_creation_that_outlasts_a_noticed_death_ends_its_process():
    """dpmpi.resilient.stuck_creation: inside a guarded creation, once the failure watcher has
    noticed a death and the limit has passed, the process is ended with the creation named; a
    creation that returns first is left alone, and nothing is ended without a notice."""
    import threading

    from dpmpi.resilient.stuck_creation import CAUSE, CreationWatch

    ended: list[str] = []
    done = threading.Event()

    def end(why):
        ended.append(why)
        done.set()

    watch = CreationWatch(noticed=lambda: True, limit=lambda: 0.0, end=end)
    with watch.guarded("Create_intercomm"):
        assert done.wait(10)  # (the creation "stuck" here until the watch ended it)
    assert len(ended) == 1 and ended[0].startswith(f"Create_intercomm: {CAUSE}"), ended
    calm = CreationWatch(noticed=lambda: False, limit=lambda: 0.0, end=end)
    for _ in range(3):
        with calm.guarded("Merge"):
            pass  # (no notice: never ended; a creation that returns disarms the watch)
    patient = CreationWatch(noticed=lambda: True, limit=lambda: 3600.0, end=end)
    with patient.guarded("Merge"):
        pass
    assert len(ended) == 1, ended


def test_a_spawns_environment_keeps_to_an_info_values_limit():
    """The spawn's PMIX_ENVAR held all of a replacement's settings: a long DPMPI_EVENTS path or
    PYTHONPATH passed Open MPI's 255 characters and every respawn failed with
    MPI_ERR_INFO_VALUE (fifty-first session, a test's events path). Only what the process needs
    at start goes there, as much as fits, most needed first; the rest comes in the SpawnInfo."""
    from dpmpi.resilient.spawn import envar
    env = {"DPMPI_SPAWNED": "1", "DPMPI_REPLACEMENT": "1", "DPMPI_STATUS": "1", "PYTHONPATH": "/boot",
           "DPMPI_EVENTS": "/tmp/" + "e" * 300, "DPMPI_JOB_TAG": "0123456789abcdef"}
    assert envar(env) == "DPMPI_SPAWNED=1\nDPMPI_REPLACEMENT=1\nDPMPI_STATUS=1\nPYTHONPATH=/boot"
    env["PYTHONPATH"] = "/p" * 200
    assert envar(env) == "DPMPI_SPAWNED=1\nDPMPI_REPLACEMENT=1\nDPMPI_STATUS=1"
    assert len(envar({**env, "PYTHONPATH": "/p" * 95})) <= 255
