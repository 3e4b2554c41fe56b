"""Derived communicators: those the program makes from the active one (``Split``, ``Dup``,
``Create_group``, and from those). Each is recorded as a recipe keyed by *logical* rank and
rebuilt in place after each repair; on a replacement they are built fresh by the repair and
handed out, in creation order, when its program asks for them."""
from __future__ import annotations

from typing import Any

from mpi4py import MPI

from dpmpi.comm import Comm, rebind
from dpmpi.mpicall import exchange, warm_up
from dpmpi.errors import from_mpi
from dpmpi.resilient.plan import Recipe
from dpmpi.resilient.state import State


class Tracked(Comm):
    """A communicator whose derived communicators dpmpi tracks and rebuilds after repairs."""

    _state: State
    _index = -1  # its recipe's index (-1: the active communicator)

    def Split(self, color: int = 0, key: int = 0) -> Comm:
        self._state.not_spare("Split")
        return derive(self._state, "Split", self, (color, key))

    def Dup(self) -> Comm:
        self._state.not_spare("Dup")
        return derive(self._state, "Dup", self, ())

    def Create_group(self, group: MPI.Group, tag: int = 0) -> Comm:
        self._state.not_spare("Create_group")
        return derive(self._state, "Create_group", self, (group, tag))

    def add_repair_listener(self, listener: Any) -> None:
        """Tell ``listener`` about every repair on this process (on the active communicator or one
        derived from it: the same repairs) (the contract between repair and
        the layers above it: snapshots, NCCL communicators, the failure watcher).

        ``listener.repair_begins()`` is called in the repairing thread before the repair's first
        MPI call, on every process that takes part: stop your threads' MPI traffic and revoke
        your own communicators (so peers blocked on them wake up); no collective or blocking
        call; it must not raise. ``listener.repair_done(event)`` is called after the repair
        committed, on processes holding an active rank: the communicator is usable, collective
        calls on it are allowed, and a ProcFailedError raised there propagates out of
        ``Respawn()``. Held weakly; called in registration order."""
        for name in ("repair_begins", "repair_done"):
            if not callable(getattr(listener, name, None)):
                raise TypeError(f"add_repair_listener() takes an object with repair_begins() and "
                                f"repair_done(event); {type(listener).__name__} has no {name}()")
        self._state.listeners.add(listener)

    def remove_repair_listener(self, listener: Any) -> None:
        """Stop telling ``listener`` about repairs (no error if it was not registered)."""
        self._state.listeners.discard(listener)


class Derived(Tracked):
    """A communicator derived from the active one; rebuilt in place after each repair."""

    def __init__(self, raw: MPI.Comm, index: int, state: State) -> None:
        super().__init__(raw)
        self._index = index
        self._state = state


def derive(state: State, op: str, parent: Tracked, args: tuple) -> Any:
    """``parent.<op>(*args)`` (collective over ``parent``), recorded so that repairs remake it."""
    if state.replay:  # a replacement catching up: the survivors made this one already
        return state.replay.pop(0)
    praw, me = parent.mpi, state.logical()
    if op == "Split":
        color, key = args
        if color != MPI.UNDEFINED and (isinstance(color, bool) or not isinstance(color, int) or color < 0):
            raise ValueError(f"Split color must be an int >= 0 or MPI.UNDEFINED, got {color!r}")
        if isinstance(key, bool) or not isinstance(key, int):
            raise TypeError(f"Split key must be an int, got {key!r}")
        try:
            table = exchange(lambda: praw.allgather((me, color, key)))
        except MPI.Exception as exc:
            raise from_mpi(exc, praw, "Split") from exc
        recipe = Recipe(op, parent._index, {lr: (c, k) for lr, c, k in table})
    elif op == "Dup":
        recipe = Recipe(op, parent._index, {})
    else:
        group, tag = args
        if not isinstance(group, MPI.Group):
            raise TypeError(f"Create_group takes an MPI.Group, got {type(group).__name__}")
        agroup = _active(state).Get_group()
        members = MPI.Group.Translate_ranks(group, list(range(group.Get_size())), agroup)
        agroup.Free()
        recipe = Recipe(op, parent._index, {-1: (tuple(members), tag)})
    made = _make(state, recipe, praw)
    state.recipes.append(recipe)
    result = MPI.COMM_NULL if made is None else Derived(made, len(state.recipes) - 1, state)
    state.derived.append(result)
    return result


def communicators(state: State) -> list[MPI.Comm]:
    """The MPI communicators of this process's derived communicators (those it is a member of).
    A repair revokes them with the active one: a peer blocked in a collective on one of them that
    the failed process is not part of would otherwise wait for ever for a member that left it
    for the repair (seen: a rank in an Allreduce on a communicator split by parity, its partner
    gone to repair after the same iteration's Allreduce on the active one failed only for it)."""
    return [d.mpi for d in state.derived if isinstance(d, Derived) and d.mpi != MPI.COMM_NULL]


def rebuild(state: State, recipes: list[Recipe], renumber: dict[int, int], fresh: bool) -> None:
    """Remake every derived communicator on the new active one (same colours and keys).
    On a replacement (``fresh``) they wait in ``state.replay`` for the program to ask for them;
    elsewhere the program's handles are pointed at the new ones and the old ones go to the
    graveyard."""
    state.recipes = [r.renumbered(renumber) for r in recipes]
    made: list[MPI.Comm | None] = []
    for recipe in state.recipes:
        praw = _active(state) if recipe.parent < 0 else made[recipe.parent]
        made.append(None if praw is None else _make(state, recipe, praw))
    if fresh:
        state.derived = [MPI.COMM_NULL if raw is None else Derived(raw, i, state) for i, raw in enumerate(made)]
        state.replay = list(state.derived)
        return
    for old, raw in zip(state.derived, made):
        if isinstance(old, Derived):
            state.graveyard.append(old.mpi)
            rebind(old, MPI.COMM_NULL if raw is None else raw)


def _active(state: State) -> MPI.Comm:
    assert state.active is not None
    return state.active.mpi


def _make(state: State, recipe: Recipe, praw: MPI.Intracomm) -> MPI.Intracomm | None:
    me = state.logical()
    try:
        if recipe.op == "Split":
            color, key = recipe.args[me]
            raw = praw.Split(color, key)
        elif recipe.op == "Dup":
            raw = praw.Dup()
        else:
            members, tag = recipe.args[-1]
            if me not in members:
                return None
            agroup, pgroup = _active(state).Get_group(), praw.Get_group()
            local = MPI.Group.Translate_ranks(agroup, list(members), pgroup)
            g = pgroup.Incl(local)
            raw = praw.Create_group(g, tag)
            for x in (g, agroup, pgroup):
                x.Free()
    except MPI.Exception as exc:
        raise from_mpi(exc, praw, recipe.op) from exc
    if raw == MPI.COMM_NULL:
        return None
    warm_up(raw, recipe.op)
    return raw
