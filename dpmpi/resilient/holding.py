"""Which derived communicators the program still holds (``dpmpi.resilient.derived``): what a
repair rebuilds, what a compaction forgets, and what a rank that lost its handle gets back.
Owner: the main thread (repairs and the program's calls that make communicators run there)."""
from __future__ import annotations

import array
import sys
import traceback

from mpi4py import MPI

from dpmpi.mpicall import exchange
from dpmpi.resilient.plan import Recipe, entries_for, partial_places, with_entries
from dpmpi.resilient.state import State


def held(state: State, places: list[int] | None = None) -> list[bool]:
    """For each recipe (or those at ``places``): whether this process still uses its communicator
    (its handle is alive, in the program or in a replacement's replay, and not freed). A
    non-member holds none (nor one whose program holds only its ``.mpi``: docs/communicators.md)."""
    out = []
    for p in range(len(state.recipes)) if places is None else places:
        raw, ref = state.derived[p], state.handles[p]
        out.append(raw is not None and raw != MPI.COMM_NULL and ref is not None and ref() is not None)
    return out


def agree_held(comm: MPI.Intracomm, mine: list[bool]) -> list[bool]:
    """Over ``comm`` (the new active communicator of a repair, before its commit: a failure here
    fails the attempt on every process; raises the peer's failure): which recipes some process
    still holds (the OR of ``mine``), for the recipes that every process has. A recipe is kept
    from the moment a rank begins to make its communicator (``derived.derive``), but a death can
    stop some ranks before that (a ``Split``'s exchange of colours and keys); the newest recipe,
    on the others only, is then dropped (so this returns as many as the shortest list)."""
    count = array.array("q", [len(mine)])
    comm.Allreduce(MPI.IN_PLACE, count, MPI.MIN)
    if count[0] == 0:
        return []
    buf = array.array("B", [1 if h else 0 for h in mine[: count[0]]])
    comm.Allreduce(MPI.IN_PLACE, buf, MPI.BOR)
    return [bool(b) for b in buf]


def handed_entries(comm: MPI.Intracomm, recipes: list[Recipe], own: list[Recipe], me: int, keep: list[bool],
                   wanted: list[int]) -> list[Recipe]:
    """Over ``comm`` (as ``agree_held``, right after it): ``recipes`` with, for each kept recipe
    made over a derived parent with per-rank arguments (``half.Split(color, key)``), the
    entries of the logical ranks ``wanted`` (those replacements take) that the survivors hold
    in their own record ``own`` (``state.recipes``; empty on a process that was not active:
    the recipes a repair hands on are one rank's), and each survivor's own (``me``: its logical
    rank in the plan it recorded them under; -1 on a spare), so that every process leaves with
    the whole table: a replacement that a second death finds still catching up knows its new
    partner's (seen: two kills 0.05 s apart, two repairs, the second replacement's Split
    deferred while the first made it, ``MPI_ERR_ARG``).
    Such a recipe holds only its parent's members' entries on each rank, so the one a
    replacement is handed may lack its own (seen: a ``KeyError`` in the replacement's rebuild,
    twenty-sixth session). No message when there is no such recipe or no replacement (the same
    on every process)."""
    places = partial_places(recipes, keep)
    if not places or not wanted:
        return recipes
    mine = entries_for(recipes, own, places, [*wanted, me] if me >= 0 else wanted)
    return with_entries(recipes, exchange(lambda: comm.allgather(mine)))


def let_go_of_unwound() -> None:
    """Clear the local variables of the frames that the exception being handled unwound (those
    that finished: a step that failed), so that a communicator made there is no longer held and
    the repair does not remake it. Called by ``Respawn`` (docs/spares.md)."""
    exc, seen = sys.exc_info()[1], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        traceback.clear_frames(exc.__traceback__)  # (skips frames still running)
        exc = exc.__cause__ or exc.__context__


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
