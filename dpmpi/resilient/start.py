"""``dpmpi.init``: split the job into active ranks and spares (or, in a process a repair
spawned, join the job), once per process."""
from __future__ import annotations

from mpi4py import MPI

from dpmpi import _guard, init_mark, mpicall, placement, watcher
from dpmpi.comm import Comm
from dpmpi.errors import from_mpi
from dpmpi.resilient import settings, spawned
from dpmpi.resilient.affinity import my_place
from dpmpi.resilient.communicator import ResilientComm
from dpmpi.resilient.plan import Plan
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
    size = MPI.COMM_WORLD.Get_size()
    n_spares = settings.spares_from(spares, size)
    policy = settings.policy_from(on_depleted)
    poll = settings.spare_poll()
    Comm(MPI.COMM_WORLD)  # checks that the job is fault tolerant
    try:
        world = MPI.COMM_WORLD.Dup()
    except MPI.Exception as exc:
        raise from_mpi(exc, MPI.COMM_WORLD, "init") from exc
    mpicall.warm_up(world, "init")
    try:
        table = world.allgather((my_place(), watcher.identity()))
    except MPI.Exception as exc:
        raise from_mpi(exc, world, "init") from exc
    # the last n_spares world ranks on one node; spread over the nodes on several (a node
    # failure must not take every spare with it: dpmpi.placement)
    actives, spare_procs = placement.choose_spares([place[0] for place, _i in table], n_spares)
    plan = Plan(0, tuple(actives), tuple(spare_procs), size)
    state = State(world, plan, policy, poll, MPI.COMM_WORLD.Get_rank())
    state.places = {proc: place for proc, (place, _i) in enumerate(table)}
    state.procs = {proc: watcher.Ident(*i) for proc, (_c, i) in enumerate(table)}
    state.watch_mode = watcher.mode_from_env(state.procs)  # the same on every process (same table)
    state.watcher = watcher.start(state, state.watch_mode)
    _adopt(state)
    _guard.set_idle_spares(list(plan.spares))
    me = state.logical()
    try:
        raw = world.Split(0 if me >= 0 else MPI.UNDEFINED, me)
    except MPI.Exception as exc:
        raise from_mpi(exc, world, "init") from exc
    if me >= 0:
        mpicall.warm_up(raw, "init")
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
    wait_as_spare(state)
    return state.active
