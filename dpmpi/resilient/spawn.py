"""Policy "respawn", the parents' side: start new processes running this program
(``Comm.Spawn``) and tell them where they stand (``SpawnInfo``); their side is ``spawned``."""
from __future__ import annotations

import os
import sys
from typing import Any, NamedTuple

from mpi4py import MPI

from dpmpi import eventlog, faults, jobid, watcher
from dpmpi.mpicall import exchange, warm_up
from dpmpi.resilient import settings
from dpmpi.resilient.plan import Filled, Place, Plan, Recipe
from dpmpi.resilient.state import State


class SpawnInfo(NamedTuple):
    """What the parents send the processes they spawned (one bcast on the merged communicator)."""

    process_ids: list[int]  # the new processes' ids, by rank in the spawned job
    base: Plan  # the plan before the repair
    plan: Plan  # the plan the repair commits
    recipes: list[Recipe]  # derived-communicator recipes, before renumbering
    with_recipes: bool  # some active rank has recipes: the new processes join the parents' agree_held
    renumber: dict[int, int]
    policy: str
    poll: float
    failed: list[int]
    filled: dict[int, Filled]
    places: dict[int, Place]  # process id -> (node, CPUs) of its place, before the repair
    prologue: Any = None  # the active ranks' closed prologue record (prologue.py), for the new processes
    derived_kept: bool = False  # some active rank recorded prologue calls on derived ones (prologue_derived.py)
    derived_left: bool = False  # some active rank gave up an agreement on a derived one (agreements.join_derived)
    env: dict[str, str] = {}  # spawn_env(): the new processes set what the spawn's PMIX_ENVAR could not hold


def program_args() -> list[str]:
    """The arguments that start this program again (for Comm.Spawn, with sys.executable)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name and spec.name != "__main__":  # python -m module
        return ["-m", spec.name.removesuffix(".__main__"), *sys.argv[1:]]
    return list(sys.argv)


# What must be in a spawned process's environment when it starts (its exit guard's boot and
# status record, dpmpi.init's choice to join, the planned faults it must not repeat), first
# to last; the rest of spawn_env() reaches it in the SpawnInfo, before it reads them.
_AT_START = ("DPMPI_SPAWNED", "DPMPI_REPLACEMENT", "DPMPI_STATUS", "PYTHONPATH")
# Open MPI's limit on an info value (MPI_MAX_INFO_VAL, 256 with the terminating NUL)
_INFO_VALUE_MAX = MPI.MAX_INFO_VAL - 1


def spawn_env() -> dict[str, str]:
    """The environment a spawned process gets on top of the launcher's."""
    env = {settings.ENV_SPAWNED: "1", faults.ENV_REPLACEMENT: "1"}
    env[jobid.ENV_TAG] = jobid.tag()  # (the job's identity, from the launch: persist_dir's files)
    for key in ("PYTHONPATH", "DPMPI_STATUS", eventlog.ENV_EVENTS, settings.ENV_SPARE_POLL, settings.ENV_ON_DEPLETED,
                watcher.ENV_WATCH, watcher.ENV_ULFM, watcher.ENV_PIDFD, watcher.ENV_POLL, watcher.ENV_SIGNAL):
        if os.environ.get(key):  # passed on untouched (validated where they are read)
            env[key] = os.environ[key]
    return env


def envar(env: dict[str, str]) -> str:
    """The value of the spawn's PMIX_ENVAR: the variables of ``env`` needed at start
    (``_AT_START``, in that order), as many as fit in an info value. Before the fifty-first
    session it held all of spawn_env(), and a long DPMPI_EVENTS path or PYTHONPATH made every
    respawn fail with MPI_ERR_INFO_VALUE (a test's: 262 characters). A variable left out here
    is the launcher's, which the spawned process inherits where its node's daemon has it. Pure."""
    lines: list[str] = []
    for key in _AT_START:
        line = f"{key}={env[key]}" if key in env else ""
        if line and len("\n".join([*lines, line])) <= _INFO_VALUE_MAX:
            lines.append(line)
    return "\n".join(lines)


def spawn(state: State, comm: MPI.Intracomm, info: SpawnInfo) -> MPI.Intracomm:
    """Start ``len(info.process_ids)`` new processes running this program (collective over
    ``comm``); they join in ``dpmpi.init`` (``spawned.join``). Returns the new protocol
    communicator: the live processes, then the new ones."""
    mpi_info = MPI.Info.Create()
    # a replacement must not repeat the faults planned for the first life of the job's ranks
    mpi_info.Set("PMIX_ENVAR", envar(info.env))
    # Room for the new processes whatever the launch options: mpirun refuses a spawn into a
    # job that fills its slots (a dead rank's slot is not given back), or one that would
    # bind a process to a core already in use without overload-allowed. Unbound here, the
    # new process takes the failed rank's CPUs itself (spawned.join).
    mpi_info.Set("PMIX_MAPBY", ":OVERSUBSCRIBE")
    mpi_info.Set("PMIX_BINDTO", "none")
    try:
        inter = comm.Spawn(sys.executable, args=program_args(), maxprocs=len(info.process_ids), info=mpi_info, root=0)
    finally:
        mpi_info.Free()
    merged = inter.Merge(high=False)
    warm_up(merged, "Spawn")
    exchange(lambda: merged.bcast(info, root=0))
    # where everyone runs (the children's failure watchers, and ours for the children)
    table = exchange(lambda: merged.allgather((state.process_id, watcher.identity(), state.watch_mode)))
    state.procs.update({proc: watcher.Ident(*ident) for proc, ident, _m in table})
    state.intercomms.append(inter)  # kept: freeing an intercommunicator to live children may block
    return merged
