"""The repair, run by every live process of the job (see the package's docstring for the
protocol): attempts until one commits, then the commit (the new plan, communicators, event)."""
from __future__ import annotations

import os
import time
import warnings
from dataclasses import asdict
from typing import Any, NamedTuple

from mpi4py import MPI

from dpmpi import _guard, agreements, ctxcomms, faults, message
from dpmpi.comm import rebind
from dpmpi.mpicall import exchange, hold_context_id, retire, warm_up, warm_up_and
from dpmpi.errors import PEER_FAILURE_CLASSES, ProcFailedError, from_mpi
from dpmpi.resilient import derived, holding, orphans, prologue_derived, settings, setup
from dpmpi.resilient.affinity import adopt_cpus
from dpmpi.eventlog import log_event
from dpmpi.resilient.events import RepairEvent, SparesDepletedWarning
from dpmpi.resilient.plan import (
    Filled,
    Plan,
    Recipe,
    SparesDepletedError,
    View,
    cpus_of_place,
    dropped_ranks,
    from_setup,
    setup_not_redone,
    inherit_places,
    handed_prologue,
    newest_view,
    plan_repair,
    reassign_agreed,
    reassign_words,
    rebuilt_account,
    recipes_root,
)
from dpmpi.resilient.recipe_entries import place_taken, taken
from dpmpi.resilient.remake import Remade, remake
from dpmpi.resilient.spawn import SpawnInfo, spawn, spawn_env
from dpmpi.resilient.state import Role, State
from dpmpi.resilient.watchdog import WATCHDOG

MAX_ATTEMPTS = 64


class Decision(NamedTuple):
    """What the attempt of a repair that committed decided (on this process)."""

    attempt: int
    alive: set[int]  # process ids alive at the shrink
    base: Plan  # the newest plan any process held
    plan: Plan  # the committed plan
    failed: list[int]
    filled: dict[int, Filled]
    renumber: dict[int, int]
    me: int  # this process's logical rank in the new plan (-1: a spare)
    raw: MPI.Comm  # the new active communicator (COMM_NULL on a spare)
    recipes: list[Recipe]  # derived-communicator recipes (for a replacement)
    keep: list[bool] | None  # which of them some active rank still holds (None: no recipes)
    quick: bool  # the quick reassign (every process held the same plan), not the allgather
    handed: Any  # the prologue record handed to this process if it replaces a rank (prologue.py), else None
    held: list[bool]  # which recipes this process still held (what it brought to agree_held)
    remade: Remade  # the derived communicators this attempt made (remake.py; none on a spare)
    unredone: str = ""  # why a replacement cannot redo what the survivors redo (plan.setup_not_redone)


def run(state: State, detected_at: float) -> None:
    """Repair the job (collective over every live process: the actives that call Respawn, the
    idle spares that a revoke woke up, the processes a repair spawned)."""
    was_active = state.logical() >= 0
    t0 = time.perf_counter()
    phases = {"revoke": 0.0, "shrink": 0.0, "agree": 0.0, "reassign": 0.0, "rebuild": 0.0}
    old_plan = state.plan
    with WATCHDOG.armed(settings.repair_timeout(), "Respawn"):
        decided = attempts(state, was_active, phases)
    commit(state, was_active, old_plan, decided, phases, t0, detected_at)
    if decided.unredone:  # (every process, after the commit: the job ends instead of hanging)
        raise SparesDepletedError(decided.unredone)


def attempts(state: State, was_active: bool, phases: dict[str, float]) -> Decision:
    """Repair attempts until one commits; returns what it decided."""
    for attempt in range(1, MAX_ATTEMPTS + 1):
        raw, keep, held, made = MPI.COMM_NULL, None, [], []
        fresh, agreed_on = None, None  # the newest world this attempt made; the one it agreed on (settle says why)
        remade = Remade([], [], [], set(), set())
        t = time.perf_counter()
        for listener in state.listeners.snapshot():  # first: their threads must stop calling MPI
            listener.repair_begins()
        if state.active is not None and was_active:
            for comm in derived.communicators(state):  # (derived.communicators says why)
                ctxcomms.revoke(comm)  # (with mpi4py's own Dup of it, where pkl5's collectives run)
            ctxcomms.revoke(state.active.mpi)
        ctxcomms.revoke(state.world)  # (already revoked or unusable: the shrink that follows decides)
        message.drain_revoked()  # (a matched message never received holds its sender: dpmpi.message)
        phases["revoke"] += time.perf_counter() - t
        faults.point("repair")  # lets tests fail a process in the middle of a repair
        try:
            # one fault point per phase (repair-PHASE): a process that dies there leaves the
            # others inside that phase's collective (tests prove each phase survives it)
            faults.point("repair-shrink")
            t = time.perf_counter()
            new_world = state.world.Shrink()
            phases["shrink"] += time.perf_counter() - t
            state.graveyard.append(state.world)
            state.world = fresh = new_world
            t = time.perf_counter()
            # the new communicator's warm-up carries the quick reassign's words (plan.py)
            mine = state.prologue.handover() if was_active else None
            # (and which agreement on the active communicator a process gave up for this repair:
            # the ones not yet in it enter it, so it completes; dpmpi.agreements says why)
            old_active = state.active.mpi if state.active is not None and was_active else MPI.COMM_NULL
            left = agreements.abandoned_on(state.derived) if was_active else {}  # (join_derived)
            words = reassign_words(state.plan, original(state), was_active and bool(state.recipes), mine is not None,
                                   bool(mine and (mine[0] or mine[1] or mine[2] > 1 or mine[4])),
                                   was_active and setup.by_program(state),
                                   was_active and (bool(state.prologue.derived) or bool(state.prologue.p2p)),
                                   bool(left), was_active and mine is not None and mine[2] == 0 and bool(mine[4]),
                                   not was_active and state.role is Role.SPARE)  # (a warm spare: init(wait=False))
            anded = warm_up_and(new_world, words + [agreements.abandoned_word(old_active)])
            agreements.join_abandoned(old_active, anded[-1])
            agreed = reassign_agreed(anded)
            quick, with_recipes = agreed.quick, agreed.with_recipes
            faults.point("repair-reassign")
            if quick:  # every process holds the same plan: the live ones are the shrunk group
                alive, base = live_processes(new_world), state.plan
                recipes = state.recipes if was_active else []
                handed = mine if was_active else ([], False, 0, 0, False, False) if agreed.prologue_over else None
            else:
                alive, base, recipes, handed = gather_views(state, was_active, new_world)
            new_plan, failed, filled, renumber = plan_repair(base, alive, state.policy)
            born = [f.process_id for f in filled.values() if f.how == "respawn"]
            if quick and born:  # a spawn passes the recipes on from rank 0, which may be a spare
                _a, _b, recipes, handed = gather_views(state, was_active, new_world)
            if agreed.by_program:  # (dpmpi.resilient.setup: the program repairs; the replacement redoes nothing)
                setup.overruled(state)
                handed = None
            handed = from_setup(handed, agreed.in_setup)  # (the same on every survivor: the root's is sent)
            if was_active:  # (dpmpi.Runtime's first snapshot then waits for them: Prologue.behind)
                state.prologue.behind = agreed.in_setup
            phases["reassign"] += time.perf_counter() - t
            if born:  # spares ran out under policy "respawn": new processes join the world
                faults.point("repair-spawn")
                t = time.perf_counter()
                # Comm.Spawn is not fault tolerant in Open MPI 5.0.11: a parent that is dead when
                # it starts leaves the others inside it until the repair deadline. An agreement
                # first turns a death since the shrink into a failed attempt (uniformly);
                # a death during the spawn itself still ends in the deadline (README).
                agreed_on = new_world
                if not new_world.Agree(1):  # (0: a process failed this attempt before it: settle)
                    raise ProcFailedError("a process failed this repair's attempt", MPI.ERR_PROC_FAILED)
                faults.point("repair-spawning")
                info = SpawnInfo(born, base, new_plan, recipes or state.recipes, with_recipes, renumber, state.policy,
                                 state.poll, failed, filled, state.places, handed, agreed.derived_kept,
                                 agreed.derived_left, spawn_env())
                new_world = spawn(state, new_world, info)
                state.graveyard.append(state.world)
                state.world = fresh = new_world
                phases["spawn"] = phases.get("spawn", 0.0) + time.perf_counter() - t
            faults.point("repair-split")
            t = time.perf_counter()
            me = new_plan.logical(state.process_id)
            raw = new_world.Split(0 if me >= 0 else MPI.UNDEFINED, me)
            if raw != MPI.COMM_NULL:
                # (watched: a peer whose Split failed starts the next attempt by revoking new_world)
                warm_up(raw, "Split", watch=new_world)
                handing = with_recipes or agreed.prologue_kept
                root = recipes_root(base, new_plan, filled) if quick and handing and not born else -1
                if root >= 0:  # the spares that took a place need the recipes and the prologue's record
                    got = exchange(lambda: raw.bcast((recipes, handed) if me == root else None, root=root))
                    recipes, handed = (recipes, handed) if was_active else got
                if with_recipes:  # which derived communicators are still in use somewhere (derived.py)
                    held = holding.held(state) if was_active else [False] * len(recipes)
                    keep = holding.agree_held(raw, held)
                    recipes = holding.handed_entries(raw, state, recipes, was_active, state.logical() if was_active
                                                       else place_taken(filled, state.process_id), keep, taken(filled))
                if agreed.derived_left:  # (first: a call whose agreement ended well is handed with its record)
                    agreements.join_derived(raw, state.derived if was_active else [], left)
                if agreed.derived_kept and taken(filled):  # (what the prologue's calls on derived ones returned)
                    prologue_derived.hand_over(raw, state.prologue.derived, was_active, state.logical() if was_active
                                               else place_taken(filled, state.process_id), failed, taken(filled),
                                               state.prologue.p2p)
                elif not was_active:
                    state.prologue.derived.stage([], -1, taken(filled))  # (nothing handed in this attempt)
                    state.prologue.p2p.stage([], -1, taken(filled))
                # before the commit: a death that cuts a creation short fails this attempt everywhere
                remade = remake(state.recipes if was_active else recipes, renumber, keep, me, raw, made)
            phases["rebuild"] += time.perf_counter() - t
            faults.point("repair-agree")
            t = time.perf_counter()
            agreed_on = new_world  # the commit: raises if a process of new_world failed, 0 if one failed the attempt
            if not new_world.Agree(1):
                raise ProcFailedError("a process failed this repair's attempt", MPI.ERR_PROC_FAILED)
            phases["agree"] += time.perf_counter() - t
        except SparesDepletedError:
            raise
        except MPI.Exception as exc:  # dpmpi's errors are MPI.Exceptions too
            if exc.Get_error_class() in PEER_FAILURE_CLASSES:
                state.graveyard.extend([raw, *(c for c in made if c is not None)])  # this attempt's, if made
                if fresh is not None and agreed_on is not fresh:
                    settle(fresh, raw, made)
                hold_context_id()  # (its Shrink or Split may have completed elsewhere: mpicall says why)
                continue  # another failure during the repair: start again
            raise from_mpi(exc, state.world, "Respawn") from exc
        break
    else:
        raise ProcFailedError(f"Respawn did not converge in {MAX_ATTEMPTS} attempts", MPI.ERR_PROC_FAILED)
    return Decision(attempt, alive, base, new_plan, failed, filled, renumber, me, raw, recipes, keep, quick,
                    handed if not was_active else None, held, remade, setup_not_redone(agreed, filled))


def settle(world: MPI.Intracomm, raw: MPI.Comm, made: list[MPI.Comm | None]) -> None:
    """End a failed attempt on this process where it made ``world`` (its shrink, or a spawn's
    merge) but has not entered the attempt's agreement on it: revoke ``world``, ``raw`` (the
    attempt's active communicator) and the derived communicators it ``made`` (each warmed up:
    safe to revoke), so that peers blocked in a collective on them leave it (a peer inside the
    creation of a communicator over one of them, which this process never reached), and enter
    that agreement with 0, so that every process enters it once and all abandon the attempt.
    Open MPI's ``Shrink`` runs an agreement on the communicator it shrinks: a process that went
    on to the next attempt's ``Shrink`` of ``world`` while a peer waited in the commit's
    ``Agree`` on it met that peer there, and the peer committed alone: a split job (py-spy stacks
    of ``bench/strangers/tp_setup.py`` with two ranks killed 0.2 s apart; an idle spare is in no
    collective of the active communicator, so it reaches the commit first; forty-second session)."""
    for comm in (*(c for c in made if c is not None), raw, world):
        ctxcomms.revoke(comm)
    try:
        world.Agree(0)
    except MPI.Exception:
        pass  # (a process of it failed: the attempt is abandoned all the same)


def gather_views(state: State, was_active: bool, world: MPI.Intracomm) -> tuple[set[int], Plan, list[Recipe], Any]:
    """Allgather every live process's ``View`` (its plan, and its recipes and prologue record on
    an active rank) and take the newest (``newest_view``): the way when the quick reassign does
    not hold."""
    mine = View(state.process_id, state.plan, state.recipes if was_active else None,
                state.prologue.handover() if was_active else None)
    views = exchange(lambda: world.allgather(mine))
    return (*newest_view(views), handed_prologue(views))


def original(state: State) -> bool:
    """Whether this process is one of the job's first: its process id is its rank in the
    launch's COMM_WORLD (a process that a repair spawned has another COMM_WORLD)."""
    return MPI.Comm.Get_parent() == MPI.COMM_NULL and state.process_id == MPI.COMM_WORLD.Get_rank()


def live_processes(comm: MPI.Intracomm) -> set[int]:
    """The process ids of ``comm``'s processes when all are among the job's first (their ranks
    in COMM_WORLD): local, no message."""
    group, world = comm.Get_group(), MPI.COMM_WORLD.Get_group()
    try:
        return set(MPI.Group.Translate_ranks(group, list(range(group.Get_size())), world))
    finally:
        group.Free()
        world.Free()


def commit(state: State, was_active: bool, old_plan: Plan, decided: Decision, phases: dict[str, float], t0: float,
           detected_at: float) -> None:
    """Adopt the committed plan: the new active communicator, derived ones, the event."""
    (attempt, alive, base, new_plan, failed, filled, renumber, me, raw, recipes, keep, quick, handed, held,
     remade, _unredone) = decided
    dead = [proc for proc in old_plan.actives + old_plan.spares if proc not in alive]
    # every process the job went on without so far, not only this repair's dead (a spare called in
    # later, whose record may be the only one left: Plan.departed)
    _guard.note_recovered(new_plan.departed())
    if me >= 0 and not was_active:
        adopt_cpus(cpus_of_place(state.places, base, filled, state.process_id))
    state.places = inherit_places(state.places, base, filled)
    state.plan = new_plan
    _guard.set_idle_spares(list(new_plan.spares))
    t = time.perf_counter()
    before = state.recipes if was_active else recipes  # (derived.rebuild replaces state.recipes)
    if me >= 0:
        assert state.active is not None  # (a spare's wraps COMM_SELF until it is called in)
        replaced = rebind(state.active, raw)  # (the program's comm.mpi object takes raw's handle)
        if was_active:  # (a waiting spare's placeholder wraps COMM_SELF: nothing to free)
            state.graveyard.append(replaced)
        derived.rebuild(state, renumber, fresh=not was_active, keep=keep, remade=remade)
        if not was_active:  # its own prologue, from the start of the program, is answered from the record
            setup.adopted(state, handed)
        state.role = Role.SURVIVOR if was_active else Role.RECOVERED
    if state.watcher is not None:  # the new set of peers (and, with ULFM, a new communicator)
        state.watcher.rearm()
    bury(state)
    live = [ident.pid for ident in orphans.on_my_node(state.procs, state.process_id, alive)] + [os.getpid()]
    orphans.end_groups(orphans.on_my_node(state.procs, state.process_id, dead), live)  # (their children: orphans.py)
    phases["rebuild"] += time.perf_counter() - t
    dropped = dropped_ranks(filled)
    event = RepairEvent(
        repair=new_plan.repairs, rank=me, process_id=state.process_id,
        role=state.role.value if me >= 0 else Role.SPARE.value,
        failed=failed, filled=filled, renumber=renumber, size=len(new_plan.actives), attempts=attempt,
        detected_at=detected_at,
        phases_ms={k: round(1e3 * v, 3) for k, v in phases.items()},
        total_ms=round(1e3 * (time.perf_counter() - t0), 3), repaired_at=time.time(),
        reassigned="quick" if quick else "allgather",
        **(rebuilt_account(before, keep, held) if me >= 0 else {}),
    )
    state.history.append(event)
    log_event({"event": "repair", **asdict(event)})
    if dropped and me >= 0:
        warnings.warn(
            f"dpmpi: no spare left for logical rank(s) {dropped}; continuing with {event.size} ranks "
            f"(renumbered; policy 'shrink')", SparesDepletedWarning, stacklevel=3)
    if me >= 0:
        for listener in state.listeners.snapshot():
            listener.repair_done(event)
        for cb in list(state.callbacks):
            cb(event)


def bury(state: State) -> None:
    """Retire the communicators that the committed repair replaced: revoked (or left by a failed
    attempt), they are never freed (``dpmpi.mpicall.retire`` says why)."""
    for comm in state.graveyard:
        retire(comm)
    state.graveyard.clear()

