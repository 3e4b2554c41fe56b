"""What each process of a repair makes its derived communicators with, where that differs by
rank: pure decisions for ``holding.handed_entries``.

A recipe made over a *derived* parent is recorded by each rank as its own instance of that
parent made it: ``half.Split(color, key)`` holds only the members of this rank's half (the
colours and keys allgathered over it), ``half.Create(group)`` or ``half.Create_cart(dims)`` this
half's group or grid. Positions are shared by every rank, contents are not, so the recipes a
repair hands on (one rank's) fit only that rank's half (twenty-sixth session: a replacement in
the other half died with a ``KeyError``, or made its ``Create`` with the other half's members,
and the job went on shrunk with another result). Each process that was active therefore keeps
its own record, and the survivors bring, for the logical ranks that replacements take, what
they recorded when it was the same instance. What nobody brings (every member of that instance
died together) is marked unknown: the replacements make it together when their program asks."""
from __future__ import annotations

from typing import Any, Iterable

from dpmpi.resilient.plan import PER_RANK, UNKNOWN, Filled, Recipe


GROUPS = ("Create_group", "Create")  # (their groups may differ by rank on any parent: disjoint ones)
ANYONE = -3  # an entries key (never a logical rank): arguments from a survivor that could not tell its instance


def derived_places(recipes: list[Recipe], keep: list[bool]) -> list[int]:
    """The kept recipes (``keep``: ``agree_held``'s result for the first ``len(keep)``) whose
    arguments may differ by rank: those made over a derived parent, and ``Create_group`` and
    ``Create`` ones (each rank may name its own group). The same on every process (ops and
    parents are)."""
    return [p for p, k in enumerate(keep) if k and (recipes[p].parent >= 0 or recipes[p].op in GROUPS)]


def taken(filled: dict[int, Filled]) -> list[int]:
    """The logical ranks that processes which were not active take in a repair (spares, spawned
    ones), from ``plan_repair``'s ``filled``."""
    return sorted(lr for lr, f in filled.items() if f.how != "dropped")


def place_taken(filled: dict[int, Filled], process_id: int) -> int:
    """The logical rank (before the repair's renumbering) that ``process_id`` takes; -1: none."""
    return next((lr for lr, f in filled.items() if f.how != "dropped" and f.process_id == process_id), -1)


def own_records(recipes: list[Recipe], own: list[Recipe], places: list[int]) -> list[Recipe]:
    """``recipes`` (handed on) with this process's own record at ``places`` where it holds the
    same operation on the same parent (a process that was active: what its instance made)."""
    out = list(recipes)
    for p in places:
        if p < len(own) and own[p].op == out[p].op and own[p].parent == out[p].parent:
            out[p] = own[p]
    return out


def entries_for(recipes: list[Recipe], places: list[int], ranks: Iterable[int],
                instances: dict[int, frozenset[int]]) -> dict[int, dict[int, Any]]:
    """What this process (one that was active, ``recipes`` its own record at ``places``) brings
    for the logical ranks ``ranks``, as ``{place: {logical rank: what}}``: a per-rank recipe's
    entry for each it holds; another recipe's arguments for each member of this process's
    instance of its parent (``instances``: those members, by place; every rank for the active
    communicator), and a ``Create_group``'s or ``Create``'s for each member of its group too
    (``with_entries`` prefers those); under ``ANYONE`` where it could not tell its instance (it
    holds neither the parent nor the communicator)."""
    ranks = list(ranks)
    out: dict[int, dict[int, Any]] = {}
    for p in places:
        r = recipes[p]
        if UNKNOWN in r.args:
            continue
        if r.op in PER_RANK:
            got = {lr: r.args[lr] for lr in ranks if lr in r.args}
        else:
            inside = set(r.args[-1][0]) if r.op in GROUPS else set()
            inside |= set(ranks) if r.parent < 0 else instances.get(p, frozenset())
            got = {lr: r.args for lr in ranks if lr in inside}
            if r.parent >= 0 and p not in instances:
                got[ANYONE] = r.args  # (its instance unknown here: it may be a replacement's)
        if got:
            out[p] = got
    return out


def with_entries(recipes: list[Recipe], places: list[int], gathered: list[dict[int, dict[int, Any]]], me: int,
                 fresh: bool) -> list[Recipe]:
    """``recipes`` with what every process brought (``entries_for``): per-rank entries added;
    another recipe's arguments taken where brought for ``me`` (this process's logical rank
    before the repair's renumbering, or the one it takes; a ``Create_group``'s or ``Create``'s
    naming ``me`` over one that does not). On a process that was not active
    (``fresh``), a recipe at ``places`` that nobody brought its arguments for takes those of a
    survivor that could not tell its instance (it may share this one's, and would make it in
    the repair), or else is marked ``UNKNOWN`` (a per-rank one lacks its entry already)."""
    out, brought, anyone = list(recipes), set(), {}
    for entries in gathered:
        for p, got in entries.items():
            r = out[p]
            if r.op in PER_RANK:
                out[p] = Recipe(r.op, r.parent, {**r.args, **got})
                continue
            if me in got and (p not in brought or (r.op in GROUPS and me in got[me][-1][0])):
                out[p] = Recipe(r.op, r.parent, got[me])  # (its own group's first)
                brought.add(p)
            if ANYONE in got:
                anyone.setdefault(p, got[ANYONE])
    if fresh:
        for p in places:
            if out[p].op not in PER_RANK and p not in brought:
                args = anyone.get(p)  # (some survivor may share its instance: never left to the program then)
                out[p] = Recipe(out[p].op, out[p].parent, {UNKNOWN: True} if args is None else args)
    return out
