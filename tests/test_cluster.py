"""Node failures on the simulated cluster (dpmpi.cluster_sim: namespaces as nodes, TCP between
them; needs root). Each test is one dpmpi-run job over 2 nodes with a hard timeout; the harness
kills a node's processes while logical rank 0 waits on a FIFO after committing epoch 3."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dpmpi import cluster_sim

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("unshare") is None,
                                reason="the simulated cluster needs root, ip (iproute2) and unshare")

PROGRAM = Path(__file__).resolve().parent / "programs" / "cluster_snap.py"
PAUSE_AT, EPOCHS = 3, 5
TIMEOUT = 60


def start(cluster, n, spares, *args, env=None, launcher_args=()):
    fifo = cluster.gate()
    cmd = [sys.executable, "-m", "dpmpi.run", "-n", str(n), "--spares", str(spares), *cluster.mpirun_args(),
           *launcher_args, "--",
           sys.executable, str(PROGRAM), "--fifo", str(fifo), "--pause-at", str(PAUSE_AT), "--epochs", str(EPOCHS),
           *map(str, args)]
    job = cluster.start(cmd, env={**os.environ, **(env or {})})
    return job, fifo


def strike(cluster, job, fifo, kill):
    """Wait until rank 0 paused, kill (``kill()``), then let rank 0 go on."""
    try:
        job.wait_event("paused", TIMEOUT)
    except TimeoutError:
        rc, out, err = job.finish(5)
        pytest.fail(f"the job never paused (exit {rc})\n{out}\n{err}")
    killed = kill()
    assert killed, "nothing was killed"
    cluster.release(fifo)
    return killed


def check_restored(job, rc, out, err, n_active):
    assert rc is not None, f"hang: the job did not end in {TIMEOUT} s\n{out}\n{err}"
    assert not job.by_rank("lost"), out + err
    assert rc == 0, f"exit code {rc}\n{out}\n{err}"
    restored, done = job.by_rank("restored"), job.by_rank("done")
    assert sorted(restored) == list(range(n_active)), out
    for r, e in restored.items():
        assert e["ok"] and e["epoch"] == PAUSE_AT, e
    assert sorted(done) == list(range(n_active)), out
    for r, e in done.items():  # bit for bit what a failure-free run holds at the end
        assert e["digest"] == e["want"] and e["epoch"] == EPOCHS and e["size"] == n_active, e


def test_a_nodes_ranks_killed_every_rank_restores_bit_for_bit():
    """2 nodes x 4 slots, 4 active ranks + 4 spares: all four processes of node 1 (two active
    ranks, two spares) are killed, its prted lives on; the spares on node 0 take over and every
    rank restores its state of epoch 3 (copies of node 1's ranks must live on node 0)."""
    with cluster_sim.Cluster(nodes=2, slots=4) as cluster:
        job, fifo = start(cluster, 8, 4)
        killed = strike(cluster, job, fifo, lambda: cluster.kill_ranks(1))
        rc, out, err = job.finish(TIMEOUT)
        assert len(killed) == 4, (killed, out, err)
        check_restored(job, rc, out, err, 4)
        first = [e["node"] for e in job.events if e["event"] == "active" and e["role"] == "INITIAL"]
        assert sorted(first) == [cluster.names[0]] * 2 + [cluster.names[1]] * 2, first  # 2 actives per node
        recovered = [e for e in job.events if e["event"] == "restored" and e["role"] == "RECOVERED"]
        assert len(recovered) == 2 and {e["node"] for e in recovered} == {cluster.names[0]}, recovered


def check_job_ended_for_the_lost_node(cluster, rc, out, err):
    """Open MPI 5.0.11's PRRTE ends the whole job when it loses a daemon (docs/cluster.md): the
    job must end (no hang), fail, and say which node was lost."""
    assert rc is not None, f"hang: the job did not end in {TIMEOUT} s\n{out}\n{err}"
    assert rc != 0, out + err
    lost = [line for line in err.splitlines() if "dpmpi-run: " in line and " was lost " in line]
    assert lost and (cluster.names[1] in lost[0] or "PRRTE daemon 1 " in lost[0]), err
    assert not [e for e in out.splitlines() if '"done"' in e], out


def test_a_whole_node_killed_ends_the_job_with_a_clear_error():
    """Every process of node 1 killed, its prted too: not survivable with Open MPI 5.0.11."""
    with cluster_sim.Cluster(nodes=2, slots=2) as cluster:
        job, fifo = start(cluster, 4, 2)
        strike(cluster, job, fifo, lambda: cluster.kill_node(1))
        check_job_ended_for_the_lost_node(cluster, *job.finish(TIMEOUT))


@pytest.mark.long  # ~14 s (make test-long); bench/cluster_sim.py measures it in series
def test_a_silent_node_ends_the_job_with_a_clear_error():
    """Node 1's link cut (its processes run on): the daemons' keepalives notice it (short ones
    here; dpmpi-run's default takes ~16 s), then PRRTE ends the job as for a dead node."""
    keepalive = ["--prtemca", "oob_tcp_keepalive_time", "1", "--prtemca", "oob_tcp_keepalive_intvl", "1",
                 "--prtemca", "oob_tcp_keepalive_probes", "2"]
    with cluster_sim.Cluster(nodes=2, slots=2) as cluster:
        job, fifo = start(cluster, 4, 2, launcher_args=keepalive)
        strike(cluster, job, fifo, lambda: cluster.cut(1) or [cluster.names[1]])
        check_job_ended_for_the_lost_node(cluster, *job.finish(TIMEOUT))


# ---- the simulator's own housekeeping (no MPI) -------------------------------------------------
def test_namespaces_are_removed_when_the_block_fails():
    with pytest.raises(RuntimeError, match="inside"):
        with cluster_sim.Cluster(nodes=2, slots=1) as cluster:
            names = [cluster.bridge_ns, *cluster.names]
            assert set(names) <= set(cluster_sim.namespaces())
            raise RuntimeError("inside")
    assert not set(names) & set(cluster_sim.namespaces())
    assert not cluster.dir.exists()


def test_leftovers_of_a_dead_run_are_removed():
    # a pid above pid_max never lives: a run of the simulator that was killed
    dead = int(Path("/proc/sys/kernel/pid_max").read_text()) + 1
    stale = f"{cluster_sim.PREFIX}{dead}-n0"
    subprocess.run(["ip", "netns", "add", stale], check=True)
    try:
        assert stale in cluster_sim.remove_leftovers()
        assert stale not in cluster_sim.namespaces()
    finally:
        subprocess.run(["ip", "netns", "delete", stale], capture_output=True)


def test_two_clusters_in_one_process_are_apart():
    with cluster_sim.Cluster(nodes=1, slots=1) as a:
        with cluster_sim.Cluster(nodes=1, slots=1) as b:
            assert not set(a.names) & set(b.names)
        assert set(a.names) <= set(cluster_sim.namespaces())
        assert not set(b.names) & set(cluster_sim.namespaces())


@pytest.mark.long  # ~10 s (make test-long): make test covers confirm_steps on one node (test_workloads)
def test_the_runtime_across_nodes_confirms_its_steps_and_ends_identical(dpmpi_run):
    """examples/train_mlp.py on 2 nodes x 4 slots (4 active + 4 spares): the active ranks of node 1
    die at step 10; the runtime confirms every step with an agreement (on by default across
    nodes) and every rank ends bit for bit where the same job ends on one node without failures."""
    mlp = Path(__file__).resolve().parent.parent / "examples" / "train_mlp.py"
    # two buddies per snapshot: node 1's two actives may die at different moments (the second one
    # can be interrupted by the first death and die in its next life, right after the restore)
    args = ["--steps", "24", "--state-mib", "1", "--batch", "32", "--replicas", "2"]
    ref = dpmpi_run(5, str(mlp), *args, launcher_args=["--spares", "1"], timeout=TIMEOUT)
    assert ref.returncode == 0, ref.stderr
    want = {r: e["digest"] for r, e in ref.by_rank("final").items()}
    assert sorted(want) == [0, 1, 2, 3] and not any(e["confirmed"] for e in ref.by_rank("final").values())
    with cluster_sim.Cluster(nodes=2, slots=4) as cluster:
        cmd = [sys.executable, "-m", "dpmpi.run", "-n", "8", "--spares", "4", *cluster.mpirun_args(), "--",
               sys.executable, str(mlp), *args]
        faults = "4:step@10:KILL,5:step@10:KILL"  # node 1's active ranks (placement.choose_spares)
        job = cluster.start(cmd, env={**os.environ, "DPMPI_FAULTS": faults})
        rc, out, err = job.finish(2 * TIMEOUT)
    assert rc == 0, f"exit code {rc}\n{out[-3000:]}\n{err[-3000:]}"
    final = job.by_rank("final")
    assert {r: e["digest"] for r, e in final.items()} == want, out[-3000:]
    assert all(e["confirmed"] >= 14 for e in final.values()), final  # confirm_steps was on
    assert sum(len(e["recoveries"]) for e in final.values()) >= 2, final  # node 1's actives died
    # no agreement left open (dpmpi.agreements), no han schedule error, no MPI error at the end
    assert not [line for line in err.splitlines() if any(
        m in line for m in ("ERRONEOUS", "NBC_", "OPAL ERROR", "Segmentation", "signal 11"))], err[-3000:]
