"""Making derived communicators from their recipes (``derived.py`` records them): one at the
program's call, and all those a repair keeps, inside the repair's attempt, before its commit
agreement. There a death that cuts a creation short fails the attempt on every process (the
commit's ``Agree`` raises, or returns 0 from those whose creation failed: ``repair.settle``),
and the repair starts again from its shrink with what it had before: nothing of the attempt's
plan has been adopted yet. (Made after
the commit, as until the forty-second session, such a death raised out of the repair: a
survivor's ``RevokedError`` into the program, a spare's ``ProcFailedError`` out of
``dpmpi.init()``.) The communicators a failed attempt made are retired with its active one."""
from __future__ import annotations

import math
from typing import NamedTuple

from mpi4py import MPI

from dpmpi import faults
from dpmpi.ctxcomms import revoke
from dpmpi.errors import failed_ranks, from_mpi
from dpmpi.mpicall import hold_context_id, warm_up
from dpmpi.resilient import intercomms, recipe_args, topology
from dpmpi.resilient.plan import PER_RANK, Recipe, kept_recipes, unknown_to_survivors
from dpmpi.resilient.stuck_creation import CREATIONS


class Remade(NamedTuple):
    """What a repair's attempt made of the recipes it keeps (``remake``), for ``derived.rebuild``."""

    recipes: list[Recipe]  # the kept ones, renumbered for the new plan
    old: list[int]  # each one's index among the recipes before the repair
    made: list[MPI.Comm | None]  # each one's communicator (None: this rank is not a member, later, or deferred)
    later: set[int]  # made when the program asks for it (every rank that knew it died: derived._make_late)
    deferred: set[int]  # made after the commit (``finish``)


def remake(recipes: list[Recipe], renumber: dict[int, int], keep: list[bool] | None, me: int,
           active: MPI.Intracomm, made: list[MPI.Comm | None]) -> Remade:
    """Make the derived communicators still held somewhere (``keep``: ``agree_held``'s result
    for the first ``len(keep)`` recipes; None: no recipes) on ``active``, the attempt's new active
    communicator, where this process is logical rank ``me``, with the same colours and keys.
    Collective over ``active``. Appends each to ``made`` as it goes (the caller's list: what a
    failure left made is retired by the caller). Intercommunicators, and what is made from them,
    are deferred to ``finish``, after the commit: the remote group of one may be made only at
    its replacements' call, after the repair (``later``), and the survivors' side waits for it."""
    kept, old = kept_recipes(recipes[: len(keep or [])], keep or [])  # (None: none; agree_held says why fewer)
    renumbered = [r.renumbered(renumber) for r in kept]
    later: set[int] = set()
    deferred = after_commit(renumbered)
    if renumbered:
        faults.point("repair-derived")  # (tests: a death as a repair begins to remake the derived communicators)
    for i in range(len(renumbered)):
        made.append(None if i in deferred else _made(renumbered, i, made, later, me, active))
    return Remade(renumbered, old, made, later, deferred)


def after_commit(recipes: list[Recipe]) -> set[int]:
    """The places of the recipes a repair makes after its commit (pure): intercommunicators,
    and every recipe made from one of them (recipes come after their parents)."""
    deferred: set[int] = set()
    for i, recipe in enumerate(recipes):
        if recipe.op in intercomms.OPS or recipe.parent in deferred:
            deferred.add(i)
    return deferred


def finish(remade: Remade, me: int, active: MPI.Intracomm) -> list[MPI.Comm | None]:
    """After the commit: make the recipes ``remake`` deferred, in order (collective over
    ``active``, the new active communicator). A death here raises out of the repair."""
    made = list(remade.made)
    for i in sorted(remade.deferred):
        made[i] = _made(remade.recipes, i, made, remade.later, me, active)
    return made


def _made(recipes: list[Recipe], i: int, made: list[MPI.Comm | None], later: set[int], me: int,
          active: MPI.Intracomm) -> MPI.Comm | None:
    """Recipe ``i`` made now (None: this rank is not a member of its parent; or it is made
    later, added to ``later``)."""
    recipe = recipes[i]
    praw = active if recipe.parent < 0 else made[recipe.parent]
    if recipe.parent in later or (praw is not None and unknown_to_survivors(recipe, me)):
        later.add(i)
    return None if praw is None or i in later else make(recipe, praw, me, active)


def make(recipe: Recipe, praw: MPI.Intracomm, me: int, active: MPI.Intracomm) -> MPI.Intracomm | None:
    """``recipe`` made over ``praw`` (collective over it) by logical rank ``me`` of ``active``,
    warmed up; None where this rank is not a member. A failure revokes ``praw`` and ``active``."""
    try:
        if recipe.op in topology.GRAPH_OPS:
            raw = topology.make(recipe.op, recipe.args[me if recipe.op in PER_RANK else -1], praw,
                                lambda ranks: recipe_args.translate(active, ranks, praw))
        elif recipe.op in PER_RANK:
            color, key, *hints = recipe.args[me]
            raw = praw.Split(color, key) if recipe.op == "Split" else topology.with_info(
                hints[0] if hints else None, lambda info: praw.Split_type(color, key, info))
        elif recipe.op == "Dup":
            hints = recipe.args.get(-1)
            raw = praw.Dup() if hints is None else topology.with_info(hints, praw.Dup)
        elif recipe.op in intercomms.OPS:
            with CREATIONS.guarded(recipe.op):  # (Open MPI can keep it there for ever: stuck_creation)
                raw = intercomms.make(recipe.op, recipe.args[-1], praw, active)
            if raw is None:  # (a shrink dropped its remote leader)
                return None
        elif recipe.op == "Sub":
            raw = praw.Sub(list(recipe.args[-1]))
        elif recipe.op == "Create_cart":
            dims, periods, reorder = recipe.args[-1]
            if math.prod(dims) > praw.Get_size():  # (a repair that shrank the job: the grid no longer fits)
                return None
            raw = praw.Create_cart(list(dims), list(periods), reorder)
        elif recipe.op == "Create_group":  # as a Split, every rank of the parent (the contract): fault tolerant
            members = recipe.args[-1][0]  # (Open MPI's Create_group is not: limitations.md)
            raw = praw.Split(min(members), members.index(me)) if me in members else praw.Split(MPI.UNDEFINED, 0)
        else:  # Create (every rank of the parent)
            members = recipe.args[-1][0]
            pgroup = praw.Get_group()
            g = pgroup.Incl(recipe_args.translate(active, list(members), praw))
            raw = praw.Create(g)
            for x in (g, pgroup):
                x.Free()
    except MPI.Exception as exc:
        hold_context_id()  # (mpicall.hold_context_id says why)
        # the others leave this creation, or its warm-up, at once where Open MPI lets them: a death
        # that cut short a schedule inside it left them there for ever (a Create_intercomm in a
        # program's setup, before its Runtime, where no repair revokes anything: limitations.md)
        for comm in (praw, active):
            revoke(comm)
        raise from_mpi(exc, praw if praw.Is_inter() or failed_ranks(praw) else active, recipe.op) from exc
    if raw == MPI.COMM_NULL:
        return None
    warm_up(raw, recipe.op, watch=active)  # (mpicall.warm_up says why it watches)
    return raw
