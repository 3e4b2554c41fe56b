"""Hung-rank detector: a rank whose process stops (SIGSTOP, frozen) is killed so the job recovers.

ULFM notices ranks that die, not ranks that stop: a stopped rank hangs the whole job. Every MPI
rank therefore runs a C thread (``cext/dpmpi_hb.c``) that beats in node-local shared memory,
``/dev/shm/dpmpi-hb-<job>/pid-<pid>``, and watches the other ranks of the job on its node; one
silent for ``DPMPI_HEARTBEAT_TIMEOUT`` seconds (default 10; at least 1; 0 disables) is sent
SIGKILL, which ULFM reports to the survivors like any death. The beat comes from the C thread,
not from MPI calls or the GIL: a rank that computes, sleeps or holds the GIL for a long time
keeps beating; only a process that does not run at all stops.

Started by ``dpmpi._guard.install`` (that is, ``import dpmpi``) in processes that are MPI ranks.
"""
from __future__ import annotations

import os
import re
import sys
from typing import Mapping

from dpmpi import config

ENV_HEARTBEAT_TIMEOUT = "DPMPI_HEARTBEAT_TIMEOUT"
SHM_ROOT = "/dev/shm"
DIR_PREFIX = "dpmpi-hb-"
# where the launcher names the job: PMIx's namespace (Open MPI 5: "prterun-HOST-PID@1"; a job
# started by Comm_Spawn gets "@2", ...: the part before "@" is the same), Open MPI 4's job id
_JOB_ENV = ("PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid")

_started = False


def timeout_from_env(environ: Mapping[str, str] | None = None) -> float:
    """``DPMPI_HEARTBEAT_TIMEOUT`` in seconds: unset or empty gives 10, ``0`` disables (0.0);
    anything else must be a finite number >= 1 (a ValueError names the variable)."""
    return float(config.get(ENV_HEARTBEAT_TIMEOUT, environ))


def job_id_from_env(environ: Mapping[str, str] | None = None) -> str | None:
    """The launcher's name for this job, safe as a file name (None when there is none). Processes
    a repair spawned into the job get the same one."""
    env = os.environ if environ is None else environ
    for name in _JOB_ENV:
        raw = env.get(name, "")
        job = re.sub(r"[^A-Za-z0-9._-]", "_", raw.split("@", 1)[0]).strip("._")
        if job:
            return job[:120]
    return None


def job_dir(job_id: str, root: str = SHM_ROOT) -> str:
    return os.path.join(root, DIR_PREFIX + job_id)


def start(rank: int, timeout: float | None = None) -> bool:
    """Start this process's heartbeat thread (idempotent); True when it runs. ``timeout``: seconds
    (None: from the environment, validated). Never fails the program when it cannot start: it
    writes one line to stderr and returns False."""
    global _started
    if timeout is None:
        timeout = timeout_from_env()
    if _started or timeout <= 0:
        return _started
    job = job_id_from_env()
    if job is None or not os.path.isdir(SHM_ROOT):
        return False  # no launcher to group the job's ranks (a singleton), or no /dev/shm
    from dpmpi import _cext

    rc = _cext.lib.dpmpi_hb_start(job_dir(job).encode(), int(rank), float(timeout))
    if rc < 0:
        sys.stderr.write(f"dpmpi: the hung-rank detector did not start in rank {rank}: {os.strerror(-rc)} "
                         f"({job_dir(job)}); a stopped rank will not be detected\n")
        return False
    _started = True
    return True


def set_rank(rank: int) -> None:
    """The rank the detector's message names for this process (a spawned replacement's id)."""
    if _started:
        from dpmpi import _cext

        _cext.lib.dpmpi_hb_set_rank(int(rank))


def running() -> bool:
    return _started


def thread_id() -> int:
    """The heartbeat thread's kernel id (for /proc/self/task/TID/stat), 0 if it is not running."""
    from dpmpi import _cext

    return int(_cext.lib.dpmpi_hb_thread_id())
