"""Which derived communicators the program still holds (``dpmpi.resilient.derived``): what a
repair rebuilds, what a compaction forgets (``compact``), and what a rank that lost its handle gets back.
Owner: the main thread (repairs and the program's calls that make communicators run there)."""
from __future__ import annotations

import array
import sys
import traceback
from types import TracebackType

from mpi4py import MPI

from dpmpi import faults
from dpmpi.errors import from_mpi
from dpmpi.mpicall import exchange
from dpmpi.resilient.plan import PER_RANK, Recipe, with_parents
from dpmpi.resilient.recipe_entries import derived_places, entries_for, own_records, with_entries
from dpmpi.resilient.state import COMPACT_MIN, State


HELD, PINNED = 1, 2  # ``held``'s bits: the program uses it here; it is kept for replacements (pin_if_outside_runs)


def held(state: State, places: list[int] | None = None) -> list[int]:
    """For each recipe (or those at ``places``): whether this process still uses its communicator
    (its handle is alive, in the program or in a replacement's replay, and not freed), or keeps it
    for replacements (``pin_if_outside_runs``). A
    non-member holds none (nor one whose program holds only its ``.mpi``: docs/communicators.md)."""
    out = []
    pinned = state.pinned if state.prologue.remade_outside_runs() else set()
    for p in range(len(state.recipes)) if places is None else places:
        raw, ref = state.derived[p], state.handles[p]
        alive = raw is not None and raw != MPI.COMM_NULL and ref is not None and ref() is not None
        out.append((HELD if alive else 0) | (PINNED if p in pinned else 0))
    return out


def pin_if_outside_runs(state: State, place: int) -> None:
    """A derived communicator made (or, on a replacement, handed) at ``place`` outside
    dpmpi.Runtime's runs: a replacement runs that code again and makes it (its call is answered
    with the one the repair remade), so every repair keeps it, freed or not, once a Runtime covers
    this process's prologue (``held``; made before the Runtime too; in a program of dpmpi's
    primitives, once its prologue closed: ``Prologue.remade_outside_runs``). Before, a node-local
    ``Split_type`` made there to count the node's ranks and then freed hung the job at its first
    failure: the replacement's call was made for real while the survivors, in their recovery,
    never made it again."""
    if not state.prologue.inside and not state.prologue.closed:
        state.pinned.add(place)


def agree_held(comm: MPI.Intracomm, mine: list[int]) -> list[int]:
    """Over ``comm`` (the new active communicator of a repair, before its commit: a failure here
    fails the attempt on every process; raises the peer's failure): which recipes some process
    still holds (the OR of ``mine``, ``held``'s bits: a kept one is non-zero; ``PINNED`` where some
    process keeps it for replacements), for the recipes that every process has. A recipe is kept
    from the moment a rank begins to make its communicator (``derived.derive``), but a death can
    stop some ranks before that (a ``Split``'s exchange of colours and keys); the newest recipe,
    on the others only, is then dropped (so this returns as many as the shortest list)."""
    count = array.array("q", [len(mine)])
    comm.Allreduce(MPI.IN_PLACE, count, MPI.MIN)
    if count[0] == 0:
        return []
    buf = array.array("B", [int(h) & (HELD | PINNED) for h in mine[: count[0]]])
    comm.Allreduce(MPI.IN_PLACE, buf, MPI.BOR)
    return list(buf)


def handed_entries(comm: MPI.Intracomm, state: State, recipes: list[Recipe], was_active: bool, me: int,
                   keep: list[bool], wanted: list[int]) -> list[Recipe]:
    """Over ``comm`` (as ``agree_held``, right after it): the recipes this process rebuilds, for
    those made over a derived parent, as its own instance of the parent made them
    (``recipe_entries`` says why): on a process that was active (``was_active``) its own record,
    with the per-rank entries the others bring; on one that takes the logical rank ``me`` (before
    the repair's renumbering), what the survivors of that instance recorded. The survivors bring
    their own entries too, so that every process leaves with the whole table of a per-rank one
    (two kills 0.05 s apart in one half made two repairs; the first replacement, handed only its
    own entry, could not give the second its partner's: ``MPI_ERR_ARG``, twenty-sixth session).
    One ``allgather`` when there are such recipes and a replacement (the same on every process)."""
    places = derived_places(recipes, keep)
    if not places:
        return recipes
    if was_active:
        recipes = own_records(recipes, state.recipes, places)
    if not wanted:
        return recipes
    mine = entries_for(recipes, places, [*wanted, me], _instances(state, recipes, places)) if was_active else {}
    return with_entries(recipes, places, exchange(lambda: comm.allgather(mine)), me, fresh=not was_active)


def _instances(state: State, recipes: list[Recipe], places: list[int]) -> dict[int, frozenset[int]]:
    """For each recipe at ``places`` that is not per-rank: the logical ranks (before the repair)
    of this process's instance of its parent, from the parent communicator it holds, or, where
    the program freed that one, from the communicator itself (a ``Dup``'s is the parent's group;
    a ``Sub``'s or ``Create_group``'s the part of it this process shares); local group calls;
    none where it holds neither."""
    assert state.active is not None
    out: dict[int, frozenset[int]] = {}
    active = state.active.mpi.Get_group()
    try:
        for p in places:
            parent = recipes[p].parent
            if recipes[p].op in PER_RANK or not 0 <= parent < len(state.derived) or p >= len(state.derived):
                continue
            raw = next((c for c in (state.derived[parent], state.derived[p]) if c is not None and c != MPI.COMM_NULL),
                       None)
            try:
                group = raw.Get_group() if raw is not None else None
            except MPI.Exception:
                group = None
            if group is not None:
                out[p] = frozenset(MPI.Group.Translate_ranks(group, list(range(group.Get_size())), active))
                group.Free()
    finally:
        active.Free()
    return out


def let_go_of_unwound() -> None:
    """Clear the local variables of the frames that the exception being handled unwound (those
    that finished: a step that failed), so that a communicator made there is no longer held and
    the repair does not remake it, and drop dpmpi's own frames below the program's last one from
    its traceback (and from those of the exceptions it was raised from). Those frames are kept
    alive by the traceback, and a frame keeps its function, whose closure clearing the frame does
    not reach: a failure raised inside the look-up of ``sub.allreduce`` (the failure watcher's
    signal lands wherever the main thread is) kept ``sub`` alive through the repair, which then
    rebuilt it and handed it to the replacement for its next ``Split``, made anew by the others
    (the job hung: about 1 in 300 runs of ``tests/programs/derived_per_step.py``, thirty-fifth
    session). Called by ``Respawn`` (docs/spares.md)."""
    exc, seen = sys.exc_info()[1], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        exc.__traceback__ = program_part(exc.__traceback__)
        traceback.clear_frames(exc.__traceback__)  # (skips frames still running)
        exc = exc.__cause__ or exc.__context__


def let_go_of(exc: BaseException) -> BaseException:
    """Drop the whole traceback of a failure that dpmpi handles itself (``dpmpi.Runtime``'s, caught
    from the step), and of the exceptions it was raised from, clearing its frames first; returns
    ``exc``. Unlike ``let_go_of_unwound`` (a failure the program handles keeps its own frames),
    this also lets go of what the step's own frames hold: a cleared frame still keeps its
    function, so a closure of the step's that used a communicator made in the step (cut short
    by the failure) kept it in use, and the repair rebuilt it and handed it to the replacement
    at its next ``Split``, made anew by the others: the job hung (2 of 2 runs of
    ``tests/programs/derived_per_step.py closure``, thirty-sixth session)."""
    at, seen = exc, set()
    while at is not None and id(at) not in seen:
        seen.add(id(at))
        if at.__traceback__ is not None:
            traceback.clear_frames(at.__traceback__)  # (skips frames still running)
            at.__traceback__ = None
        at = at.__cause__ or at.__context__
    return exc


def program_part(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` up to the program's last frame (None: it has none: an exception dpmpi raised and
    handled inside its own code). Frames are the program's unless their module is dpmpi's."""
    last, at = None, tb
    while at is not None:
        module = str(at.tb_frame.f_globals.get("__name__", ""))
        if module != "dpmpi" and not module.startswith("dpmpi."):
            last = at
        at = at.tb_next
    if last is not None:
        last.tb_next = None
    return tb if last is not None else None


def lost(raw: MPI.Comm | None, unmade: bool) -> bool:
    """Whether this process lost a derived communicator that some other active rank still holds
    (a repair keeps it), so that the repair gives it back at the program's next call that makes
    it (``derived.rebuild``). ``raw``: its communicator here before the repair; ``unmade``: its
    creation failed here. Either its creation failed here while it completed elsewhere (a death
    during the creation; the others stored theirs), or it was made here and not freed, yet the
    program let go of it: the failure's exception reached this process between the call that
    made it and the program's store (``kept = comm.Dup()``: a failure noticed during the call is
    raised as it returns). The others will not make it again, and this process's next ``Dup``
    would wait for them for ever (seen: twenty-fifth session, ``tests/programs/lost_dup.py``).
    Pure."""
    return unmade or (raw is not None and raw != MPI.COMM_NULL)


FORGOTTEN = Recipe("forgotten", -1, {})  # a recipe compact() dropped (in its place: positions are shared)


def compact(state: State, active: MPI.Intracomm) -> None:
    """Without a failure, forget the derived communicators that no active rank uses any more (a
    program that makes one in every step would otherwise keep a recipe, which names every rank,
    for each). Collective over the active communicator: the repair's agreement (``agree_held``)
    over the entries not forgotten yet (``state.live``, the same on every rank). Each forgotten
    entry keeps its place, as ``FORGOTTEN``: a rank whose agreement a failure cut short forgets
    nothing, and what no rank used then stays unused, so the next repair, which removes the
    places, drops it everywhere. (An ``Agree`` to make this uniform was tried: it made Open MPI
    5.0.11's next ``Shrink`` leave live processes out, 2 jobs of 8.) The next one runs once the
    entries not forgotten have doubled."""
    faults.point("compact")  # (tests: a rank dies here, the others inside the agreement)
    try:  # (over the live places only: a compaction costs what is kept, not every place so far)
        agreed = agree_held(active, held(state, state.live))
    except MPI.Exception as exc:
        raise from_mpi(exc, active, "Split") from exc
    keep = with_parents(state.recipes, state.live, {p for p, k in zip(state.live, agreed) if k})
    for p in state.live:
        if p not in keep:
            state.recipes[p], state.derived[p], state.handles[p] = FORGOTTEN, None, None
            state.pinned.discard(p)  # (one made before a prologue that no replacement replays: forgotten too)
    state.live = sorted(keep)
    state.compact_at = 2 * len(state.live) + COMPACT_MIN


def tracked(state: State) -> int:
    """How many derived communicators' recipes this process keeps (not forgotten)."""
    return len(state.live)
