"""``dpmpi.init``: split the job into active ranks and spares (or, in a process a repair
spawned, join the job), once per process."""
from __future__ import annotations

import importlib
import warnings
from typing import NamedTuple

from mpi4py import MPI

from dpmpi import _guard, _hooks, config, ctxcomms, faults, init_mark, mpicall, placement, watcher, world_guard
from dpmpi.comm import Comm
from dpmpi.errors import PEER_FAILURE_CLASSES, ProcFailedError, from_mpi
from dpmpi.eventlog import log_event
from dpmpi.mpicall import exchange
from dpmpi.resilient import settings, setup, spawned
from dpmpi.resilient.affinity import helper_cpus, launcher_cpus, my_place, nearest, numa_nodes, use_helper_cpus
from dpmpi.resilient.communicator import ResilientComm
from dpmpi.resilient.events import SparesDepletedWarning
from dpmpi.resilient.plan import Filled, Plan, SparesDepletedError, dropped_ranks, inherit_places, plan_start
from dpmpi.resilient.repair import MAX_ATTEMPTS
from dpmpi.resilient.spares import post_exit_agreement, wait as wait_as_spare
from dpmpi.resilient.state import Role, State

_STATE: State | None = None  # this process's, from its dpmpi.init on


def current() -> State | None:
    """This process's repair state (None before ``dpmpi.init``)."""
    return _STATE


def _adopt(state: State) -> None:
    global _STATE
    _STATE = state
    mpicall.set_job_world(lambda: state.world)
    setup.watch(state)  # (a death in the program's setup is repaired where it happens)


def init(spares: int | None = None, on_depleted: str | None = None, *, wait: bool = True) -> ResilientComm:
    """Split COMM_WORLD into active ranks and spares; return the active communicator.

    Collective over COMM_WORLD. The last ``spares`` world ranks (spread over the nodes when the
    job spans several; default: ``DPMPI_SPARES``, set
    by ``dpmpi-run --spares``, else 0) become spares: on them this call returns only when the
    spare takes a failed rank's place (``comm.role is Role.RECOVERED``), or never (the process
    exits with status 0 when the job ends). With ``wait=False`` a spare gets its communicator at
    once, with ``role is Role.SPARE``: it can build its state (arrays, snapshot memory) while it
    waits, so that taking over costs less; ``comm.Await()`` (or ``dpmpi.Runtime.run``) then
    waits. ``on_depleted`` ("shrink", the default, or "abort"; also ``DPMPI_ON_DEPLETED``) says
    what a repair does when spares run out."""
    if _STATE is not None:
        raise RuntimeError("dpmpi.init() was already called in this process; use the communicator it returned")
    _guard.take_over_finalize()  # (the program's MPI.Finalize() ends as a normal exit would)
    if settings.spawned() and MPI.Comm.Get_parent() != MPI.COMM_NULL:
        state = spawned.join()
        _adopt(state)
        assert state.active is not None
        return state.active
    init_mark.announce()  # (MPI is initialised by now: dpmpi-run learns it, dpmpi.init_loss)
    n_spares = settings.spares_from(spares, MPI.COMM_WORLD.Get_size())
    policy = settings.policy_from(on_depleted)
    Comm(MPI.COMM_WORLD)  # checks that the job is fault tolerant
    init_mark.announce_formation(formed=False)  # (dpmpi-run ends a formation a death left stuck)
    with _hooks.idle():  # (the formation waits for every process, however slow its start: not a hang)
        state, raw, formed = _form(n_spares, policy, settings.spare_poll())
    init_mark.announce_formation(formed=True)
    if config.get("DPMPI_HELPER_CPUS") == "auto":  # (the snapshot threads: CPUs no process is bound to)
        node, mine = my_place()
        use_helper_cpus(nearest(helper_cpus(state.places, node, launcher_cpus()), numa_nodes(), mine))
    state.watch_mode = watcher.mode_from_env(state.procs)  # the same on every process (same table)
    state.watcher = watcher.start(state, state.watch_mode)
    _adopt(state)
    _guard.set_idle_spares(list(state.plan.spares))
    world_guard.install(tuple(state.plan.spares))  # (MPI.COMM_WORLD's calls that would wait for the spares raise)
    if formed.dead:
        _started_without(state, formed)
    me = state.logical()
    if me >= 0:
        state.active = ResilientComm(raw, state)
        if state.watcher is not None:  # collective over the active ranks when ULFM is watched
            state.watcher.rearm()
        return state.active
    if state.watcher is not None:
        state.watcher.rearm()  # a spare: nothing to watch until it is called in
    post_exit_agreement(state)
    # a placeholder until called in (a repair rebuilds it in place); with wait=False the program
    # holds it, and every MPI call on it raises until Await()
    state.active = ResilientComm(MPI.COMM_SELF, state)
    if not wait:
        state.role = Role.SPARE
        return state.active
    _preload()
    wait_as_spare(state)
    return state.active


# What a cold spare's program calls first once called in (dpmpi.Runtime, dpmpi.Snapshot) imports
# modules lazily: ~25 ms of imports on the replacement's path to its first restore (thirty-ninth
# session). A spare imports them before it waits, on its main thread, with no MPI call.
PRELOAD = ("dpmpi.runtime", "dpmpi.snapshot", "dpmpi.gpu.devsnap", "numpy.random", "hashlib")


def _preload() -> None:
    for name in PRELOAD:
        importlib.import_module(name)


class Formed(NamedTuple):
    """How the job formed in ``dpmpi.init`` (for its event): the attempts it took, the processes
    that died before it formed, and how the places of those that were active were filled."""

    attempts: int
    dead: list[int]
    failed: list[int]
    filled: dict[int, Filled]


def _form(n_spares: int, policy: str, poll: float) -> tuple[State, MPI.Comm, Formed]:
    """The job's first plan and active communicator, in attempts until one commits (collective
    over COMM_WORLD's live processes). A process that dies before the job has formed is taken
    out of it like a failure in a repair: each attempt starts with a Shrink (uniform: every
    live process leaves it with the same communicator, also after a failed attempt) and ends
    with an agreement, the commit point; its place goes to a spare. Returns the state (no
    watcher yet), the active communicator (COMM_NULL on a spare) and how it went."""
    size, process_id = MPI.COMM_WORLD.Get_size(), MPI.COMM_WORLD.Get_rank()
    base: MPI.Comm = MPI.COMM_WORLD
    for attempt in range(1, MAX_ATTEMPTS + 1):
        world, raw = MPI.COMM_NULL, MPI.COMM_NULL
        try:
            world = base.Shrink()  # (a Dup but for the dead: needs no revoke of COMM_WORLD)
            mpicall.warm_up(world, "init")
            faults.point("init")  # (tests: a process dies here, the others inside the allgather)
            table = exchange(lambda: world.allgather((process_id, my_place(), watcher.identity())))
            alive = {proc for proc, _p, _i in table}
            nodes = placement.fill_nodes(size, {proc: place[0] for proc, place, _i in table})
            launched, plan, failed, filled = _plan_start(nodes, n_spares, alive, policy)
            state = State(world, plan, policy, poll, process_id)
            state.places = inherit_places({proc: place for proc, place, _i in table}, launched, filled)
            state.procs = {proc: watcher.Ident(*i) for proc, _p, i in table}
            faults.point("init-split")  # (tests: a process dies here, the others inside the Split)
            me = plan.logical(process_id)
            raw = world.Split(0 if me >= 0 else MPI.UNDEFINED, me)
            if raw != MPI.COMM_NULL:
                mpicall.warm_up(raw, "init")
            world.Agree(1)  # the commit point: raises if a process of world failed
        except SparesDepletedError:
            raise
        except MPI.Exception as exc:  # (dpmpi's errors are MPI.Exceptions too)
            if exc.Get_error_class() not in PEER_FAILURE_CLASSES:
                raise from_mpi(exc, base, "init") from exc
            for comm in (raw, world):
                if comm != MPI.COMM_NULL:
                    ctxcomms.revoke(comm)
                    mpicall.retire(comm)
            if world != MPI.COMM_NULL:
                base = world
            continue
        dead = sorted(set(range(size)) - alive)
        return state, raw, Formed(attempt, dead, failed, filled)
    raise ProcFailedError(f"dpmpi.init: the job did not form in {MAX_ATTEMPTS} attempts", MPI.ERR_PROC_FAILED)


def _plan_start(nodes: list[str], n_spares: int, alive: set[int], policy: str
                ) -> tuple[Plan, Plan, list[int], dict[int, Filled]]:
    """``plan_start`` (the plan as launched, the plan the job starts with, failed logical ranks,
    how each was filled), with errors that say the processes died in ``dpmpi.init``."""
    dead = f"process(es) {sorted(set(range(len(nodes))) - alive)} died before the job formed (in dpmpi.init)"
    try:
        launched, plan, failed, filled, _renumber = plan_start(nodes, n_spares, alive, policy)
    except SparesDepletedError as exc:
        raise SparesDepletedError(f"{dead}: {exc}", MPI.ERR_PROC_FAILED, exc.failed_ranks) from None
    if any(f.how == "respawn" for f in filled.values()):
        raise SparesDepletedError(
            f"{dead} and no spare is left to take logical rank(s) {failed}: policy 'respawn' starts new "
            f"processes only in a repair. Launch with more spares (dpmpi-run --spares S).",
            MPI.ERR_PROC_FAILED, tuple(failed))
    return launched, plan, failed, filled


def _started_without(state: State, formed: Formed) -> None:
    """After a job formed without some of its processes: the exit code counts their deaths as
    repaired around, the event log says what happened, and a dropped rank is warned of."""
    _guard.note_recovered(formed.dead)
    log_event({"event": "init", "process_id": state.process_id, "attempts": formed.attempts, "dead": formed.dead,
               "failed": formed.failed, "filled": {lr: f._asdict() for lr, f in formed.filled.items()},
               "size": len(state.plan.actives)})
    dropped = dropped_ranks(formed.filled)
    if dropped and state.logical() >= 0:
        warnings.warn(
            f"dpmpi: process(es) {formed.dead} died before the job formed and no spare was left for logical "
            f"rank(s) {dropped}; starting with {len(state.plan.actives)} ranks (policy 'shrink')",
            SparesDepletedWarning, stacklevel=3)
