import json
import os

# Every job here runs more ranks than the machine has cores: OpenBLAS's own threads (one per core,
# started at numpy's import and spinning after each BLAS call) would take CPU from the other
# ranks. One thread per rank, as on a cluster with a rank per core; set before numpy is loaded
# here, and inherited by every job's ranks (a test's expected values and its ranks' agree).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from dpmpi import cluster_sim, shmclean

PROGRAMS = Path(__file__).resolve().parent / "programs"
_SESSION_START = time.time()
# mpi4py's own test suite (vendored): unittest modules that need mpirun, run by
# bench/peer_mpi4py.py (make peer), never collected by pytest
collect_ignore = ["peer"]


@dataclass
class Job:
    returncode: int
    stdout: str
    stderr: str
    events: list = field(default_factory=list)

    def by_rank(self, event):
        return {e["rank"]: e for e in self.events if e.get("event") == event}

    def accounts(self):
        """dpmpi-run's own lines on stderr about failed ranks (not its note that it launched mpirun
        again after mpirun's transient start-up failure, which is no failure of the job)."""
        return [line for line in self.stderr.splitlines()
                if line.startswith("dpmpi-run:") and "launching again" not in line]

    def faults(self):
        out = []
        for line in self.stderr.splitlines():
            if line.startswith("[dpmpi-fault] "):
                out.append(json.loads(line[len("[dpmpi-fault] "):]))
        return out


def run_cmd(cmd, cwd, env=None, timeout=90):
    """Run a command in its own session; on timeout kill the whole session (a hang fails).
    With DPMPITEST_TRACE=path, each job's test, command, exit code, seconds and stderr tail are
    appended there (which jobs make test's time goes to)."""
    started = time.monotonic()
    full_env = dict(os.environ)
    full_env.update(env or {})
    proc = subprocess.Popen(cmd, cwd=cwd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        hung = cluster_sim.stacks([p for p in cluster_sim.session_pids(proc.pid) if p != proc.pid])
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"hang: {cmd} did not finish in {timeout} s\nstdout:\n{out}\nstderr:\n{err}\n"
                    f"the C stacks of the job's processes:\n{hung}")
    if os.environ.get("DPMPITEST_TRACE"):
        with open(os.environ["DPMPITEST_TRACE"], "a") as f:
            f.write(json.dumps({"test": os.environ.get("PYTEST_CURRENT_TEST"), "cmd": cmd, "rc": proc.returncode,
                                "s": round(time.monotonic() - started, 2), "stderr": err[-3000:]}) + "\n")
    events = []
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except ValueError:
                pass
    return Job(proc.returncode, out, err, events)


@pytest.fixture
def dpmpi_run(tmp_path):
    """Launch ``dpmpi-run -n N -- python PROGRAM ARGS`` from a scratch directory."""

    def launch(n, program, *args, faults="", env=None, launcher_args=(), timeout=90):
        job_env = {"DPMPI_FAULTS": faults} if faults else {}
        job_env.update(env or {})
        cmd = [sys.executable, "-m", "dpmpi.run", "-n", str(n), *launcher_args, "--",
               sys.executable, str(PROGRAMS / program), *map(str, args)]
        return run_cmd(cmd, tmp_path, job_env, timeout)

    return launch


@pytest.fixture(scope="session")
def activate_faults(tmp_path_factory):
    """tests/programs/c/activate_faults.c built as a library to preload (LD_PRELOAD): with
    KILL_IN_ACTIVATE=R:N rank R dies inside Open MPI's N-th communicator activation; with
    FAIL_AFTER_ACTIVATE=R:N rank R's N-th activation completes, then reports a failure (that
    creation fails on rank R only)."""
    out = tmp_path_factory.mktemp("preload") / "libactivate_faults.so"
    subprocess.run([str(Path(sys.executable).parent / "mpicc"), "-shared", "-fPIC", "-O2", "-o", str(out),
                    str(PROGRAMS / "c" / "activate_faults.c"), "-ldl"], check=True)
    return out


@pytest.fixture
def run_job(tmp_path):
    """Run any command (e.g. a plain mpirun) from a scratch directory, with a hard timeout."""

    def launch(cmd, env=None, timeout=90):
        return run_cmd(cmd, tmp_path, env, timeout)

    return launch


@pytest.fixture
def mpirun():
    """The venv's mpirun with this machine's flags (no --with-ft: tests add it themselves)."""
    return [str(Path(sys.executable).parent / "mpirun"), "--mca", "btl", "^ofi", "--oversubscribe", "--allow-run-as-root"]


@pytest.fixture
def program():
    return lambda name: str(PROGRAMS / name)


def pytest_sessionfinish(session, exitstatus):
    """Remove the shared-memory segment files this session's processes left in /dev/shm. Open
    MPI 5.0.11 leaves one behind for every singleton (a process that initialises MPI without
    mpirun: pytest's own, and many of the logic tier's subprocesses), killed or not; dpmpi-run
    removes those of its own jobs' killed ranks. Only files made since the session began, that no
    live process maps (a concurrent job's are), at least a second old (dpmpi.shmclean)."""
    shmclean.remove_orphans(_SESSION_START)
