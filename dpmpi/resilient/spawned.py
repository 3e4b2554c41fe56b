"""Policy "respawn", the spawned process's side: join the job in ``dpmpi.init`` and take the place
the repair that started it assigned (the mirror of the parents' ``spawn.spawn`` and commit)."""
from __future__ import annotations

import os
import time
from dataclasses import asdict

from mpi4py import MPI

from dpmpi import _guard, agreements, watcher
from dpmpi.mpicall import exchange, retire, warm_up
from dpmpi.errors import PEER_FAILURE_CLASSES, ProcFailedError, from_mpi
from dpmpi.resilient import derived, holding, prologue_derived, repair, setup
from dpmpi.resilient.affinity import adopt_cpus, my_place
from dpmpi.resilient.communicator import ResilientComm
from dpmpi.eventlog import log_event
from dpmpi.resilient.events import RepairEvent
from dpmpi.resilient.plan import cpus_of_place, inherit_places
from dpmpi.resilient.recipe_entries import place_taken, taken
from dpmpi.resilient.remake import remake
from dpmpi.resilient.spawn import SpawnInfo
from dpmpi.resilient.state import Role, State


def join() -> State:
    """In a process started by a repair under policy "respawn": join the job, take the place the
    repair assigned, and return the state."""
    t0 = time.perf_counter()
    parent = MPI.Comm.Get_parent()
    try:
        merged = parent.Merge(high=True)
        warm_up(merged, "Spawn")
        info: SpawnInfo = exchange(lambda: merged.bcast(None, root=0))
        os.environ.update(info.env)  # (what the spawn's PMIX_ENVAR could not hold: spawn.envar)
        process_id = info.process_ids[MPI.COMM_WORLD.Get_rank()]
        table = exchange(lambda: merged.allgather((process_id, watcher.identity(), None)))
    except MPI.Exception as exc:
        raise from_mpi(exc, parent, "dpmpi.init (spawned)") from exc
    state = State(merged, info.base, info.policy, info.poll, process_id)
    # until this process takes a place (as a spare, if this attempt fails)
    state.places = {**info.places, process_id: my_place()}
    state.procs = {proc: watcher.Ident(*ident) for proc, ident, _m in table}
    state.watch_mode = next(watcher.Mode(*m) for _p, _i, m in table if m is not None)  # the parents'
    state.watcher = watcher.start(state, state.watch_mode)
    _guard.set_record_rank(process_id)
    # the job's earlier repairs are this process's too (its status record, dpmpi-run's exit code:
    # before, a job whose processes that had seen a repair all died later ended with exit code 1)
    _guard.note_recovered(info.plan.departed())
    me = info.plan.logical(process_id)
    raw, made, agreed = MPI.COMM_NULL, [], False
    try:
        raw = merged.Split(0, me)
        warm_up(raw, "Split", watch=merged)  # (as the parents' repair.attempts does)
        # the parents' agreement on which derived communicators are still in use (repair.attempts)
        keep = holding.agree_held(raw, [False] * len(info.recipes)) if info.with_recipes else None
        recipes = holding.handed_entries(raw, state, info.recipes, False, place_taken(info.filled, process_id), keep,
                                         taken(info.filled)) if keep else info.recipes
        if info.derived_left:  # (as the parents' repair.attempts does, in its order)
            agreements.join_derived(raw, [], {})
        if info.derived_kept:  # (a spawned process takes a place)
            prologue_derived.hand_over(raw, state.prologue.derived, False, place_taken(info.filled, process_id),
                                       info.failed, taken(info.filled), state.prologue.p2p)
        remade = remake(recipes, info.renumber, keep, me, raw, made)  # (as the parents' attempt: before the commit)
        agreed = True  # (the parents' commit; 0: a process failed the attempt: repair.settle)
        if not merged.Agree(1):
            raise ProcFailedError("a process failed the repair's attempt that started this one", MPI.ERR_PROC_FAILED)
    except MPI.Exception as exc:
        if exc.Get_error_class() not in PEER_FAILURE_CLASSES:
            raise from_mpi(exc, merged, "dpmpi.init (spawned)") from exc
        # a failure during the repair that started us: join its next attempt like a new spare
        if not agreed:
            repair.settle(merged, raw, made)
        for comm in [raw, *(c for c in made if c is not None)]:
            retire(comm)
        if state.watcher is not None:
            state.watcher.rearm()  # nothing to watch yet (not active)
        state.active = ResilientComm(MPI.COMM_SELF, state)  # rebuilt in place if called in
        repair.run(state, time.time())
        if state.logical() < 0:  # not needed after all; there is no job-wide end to wait for
            _guard.exit_after_agreement(0)
        return state
    state.plan = info.plan
    adopt_cpus(cpus_of_place(state.places, info.base, info.filled, process_id))
    state.places = inherit_places(state.places, info.base, info.filled)
    state.active = ResilientComm(raw, state)
    derived.rebuild(state, info.renumber, fresh=True, keep=keep, remade=remade)
    setup.adopted(state, info.prologue)  # (its prologue is answered from the parents' record)
    state.role = Role.RECOVERED
    if state.watcher is not None:  # as the parents do in their commit
        state.watcher.rearm()
    _guard.set_idle_spares(list(info.plan.spares))
    event = RepairEvent(repair=info.plan.repairs, rank=me, process_id=process_id, role=Role.RECOVERED.value,
                        failed=info.failed, filled=info.filled, renumber=info.renumber, size=len(info.plan.actives),
                        attempts=1, detected_at=time.time(), phases_ms={},
                        total_ms=round(1e3 * (time.perf_counter() - t0), 3), repaired_at=time.time())
    state.history.append(event)
    log_event({"event": "repair", **asdict(event)})
    return state
