"""Derived communicators: those the program makes from the active one (``Split``, ``Dup``,
``Create_group``, ``Clone``, ``Split_type``, ``Create``, ``Create_cart``, ``Create_graph``,
``Create_dist_graph_adjacent``, and from those; a Cartesian one's ``Sub``). Each
is recorded as a recipe keyed by *logical* rank. A repair remakes those still in use on some
active rank (its handle alive and not freed: ``held``, ORed over the active ranks by
``agree_held``) and forgets the others, so a program that makes one in each step and frees it (or
lets go of it) does not accumulate them; survivors' handles are pointed at the new ones in place,
and a replacement's own calls of those methods are answered with the remade ones, in creation
order, until it has caught up with the survivors. Other constructors (``Create_dist_graph``,
``Create_intercomm``, ...) make communicators that no repair rebuilds."""
from __future__ import annotations

import warnings
import weakref
from typing import Any

from mpi4py import MPI

from dpmpi import calls, faults, interrupts
from dpmpi.callsite import program_level
from dpmpi.comm import Comm, plain_method, rebind
from dpmpi.errors import from_mpi
from dpmpi.request import Request
from dpmpi.mpicall import exchange
from dpmpi.resilient import holding, intercomms, prologue, prologue_derived, recipe_args, remake
from dpmpi.resilient.plan import PER_RANK, Recipe, replays
from dpmpi.resilient.remake import Remade
from dpmpi.resilient.state import COMPACT_MIN, State


NOT_REBUILT = frozenset({"Create_dist_graph"})
# made by every rank of their parent (the others: by a part of it, Create_group, or over an intercommunicator)
ALL_RANKS = frozenset({"Split", "Dup", "Split_type", "Create", "Create_cart", "Create_graph",
                       "Create_dist_graph_adjacent"})
_warned: set[str] = set()


class Tracked(Comm):
    """A communicator whose derived communicators dpmpi tracks and rebuilds after repairs."""

    _state: State
    _index = -1  # its recipe's index (-1: the active communicator)

    @interrupts.uninterrupted  # (as Comm's: the prologue's wrapper replaces the one its super() caches)
    def __getattr__(self, name: str) -> Any:
        if name in NOT_REBUILT:
            _warn_not_rebuilt(name)
        attr = super().__getattr__(name)
        if name in prologue.WATCHED and callable(attr) and not self._state.prologue.done:
            attr = self.__dict__[name] = prologue.cached(self, name, attr, self._state.prologue, self._index >= 0,
                                                         plain_method)
        return attr

    def recorded_where(self) -> Any:  # (this derived communicator in the prologue's record: prologue_derived)
        return prologue_derived.where_of(self.mpi, self._index, _active(self._state), weakref.ref(self))

    @property
    def prologue(self) -> prologue.Prologue:
        """This process's record of the program's collectives outside its runs (dpmpi.Runtime
        tells it where each run begins and ends): dpmpi.resilient.prologue."""
        return self._state.prologue

    def end_prologue(self) -> bool:
        """This process's first snapshot operation (dpmpi.Snapshot calls it): its prologue is over,
        or, on a replacement, its replay (``dpmpi.resilient.prologue``); True on a replacement of
        a rank that died in the setup (its restore has nothing to restore)."""
        return self._state.prologue.close(tell=self._state.logical() == 0)

    @interrupts.uninterrupted
    def Split(self, color: int = 0, key: int = 0) -> Comm:
        self._state.not_spare("Split")
        return derive(self._state, "Split", self, (color, key))

    @interrupts.uninterrupted
    def Dup(self, info: MPI.Info | None = None) -> Comm:
        self._state.not_spare("Dup")
        return derive(self._state, "Dup", self, (info,))

    @interrupts.uninterrupted
    def Dup_with_info(self, info: MPI.Info) -> Comm:
        self._state.not_spare("Dup_with_info")
        return derive(self._state, "Dup", self, (info,))

    @interrupts.uninterrupted
    def Idup(self, info: MPI.Info | None = None) -> tuple[Comm, Request]:
        """A ``Dup`` that repairs rebuild, made at once, with a completed request (a true ``Idup``
        was not rebuilt: a program that kept one hung at the first failure)."""
        self._state.not_spare("Idup")
        return derive(self._state, "Dup", self, (info,)), Request()

    @interrupts.uninterrupted
    def Idup_with_info(self, info: MPI.Info) -> tuple[Comm, Request]:
        self._state.not_spare("Idup_with_info")
        return derive(self._state, "Dup", self, (info,)), Request()

    @interrupts.uninterrupted
    def Create_group(self, group: MPI.Group, tag: int = 0) -> Comm:
        self._state.not_spare("Create_group")
        return derive(self._state, "Create_group", self, (group, tag))

    @interrupts.uninterrupted
    def Clone(self) -> Comm:
        self._state.not_spare("Clone")
        return derive(self._state, "Dup", self, (None,))  # (a Dup: the same recipe)

    @interrupts.uninterrupted
    def Split_type(self, split_type: int, key: int = 0, info: MPI.Info | None = None) -> Comm:
        self._state.not_spare("Split_type")
        return derive(self._state, "Split_type", self, (split_type, key, info))

    @interrupts.uninterrupted
    def Create(self, group: MPI.Group) -> Comm:
        self._state.not_spare("Create")
        return derive(self._state, "Create", self, (group, None))

    @interrupts.uninterrupted
    def Create_cart(self, dims: Any, periods: Any = None, reorder: bool = False) -> Comm:
        self._state.not_spare("Create_cart")
        return derive(self._state, "Create_cart", self, (dims, periods, reorder))

    @interrupts.uninterrupted
    def Sub(self, remain_dims: Any) -> Comm:
        """A Cartesian communicator's row, column, ... communicators (``Cartcomm.Sub``)."""
        if not isinstance(self.mpi, MPI.Cartcomm):
            raise AttributeError(f"'{type(self.mpi).__name__}' object has no attribute 'Sub' (a Create_cart one has)")
        self._state.not_spare("Sub")
        return derive(self._state, "Sub", self, (remain_dims,))

    @interrupts.uninterrupted
    def Create_intercomm(self, local_leader: int, peer_comm: Any, remote_leader: int, tag: int = 0) -> Comm:
        """Rebuilt by repairs when ``peer_comm`` is the active communicator (intercomms.py)."""
        if calls.raw(peer_comm) != _active(self._state):
            _warn_not_rebuilt("Create_intercomm (with another peer communicator than dpmpi.init's)")
            return plain_method(self, "Create_intercomm")(local_leader, peer_comm, remote_leader, tag)
        self._state.not_spare("Create_intercomm")
        return derive(self._state, "Create_intercomm", self, (local_leader, remote_leader, tag))

    @interrupts.uninterrupted
    def Merge(self, high: bool = False) -> Comm:
        if not self.mpi.Is_inter():
            raise AttributeError(f"'{type(self.mpi).__name__}' object has no attribute 'Merge' (an intercommunicator has)")
        self._state.not_spare("Merge")
        return derive(self._state, "Merge", self, (high,))

    @interrupts.uninterrupted
    def Create_graph(self, index: Any, edges: Any, reorder: bool = False) -> Comm:
        self._state.not_spare("Create_graph")
        return derive(self._state, "Create_graph", self, (index, edges, reorder))

    @interrupts.uninterrupted
    def Create_dist_graph_adjacent(self, sources: Any, destinations: Any, sourceweights: Any = None,
                                   destweights: Any = None, info: MPI.Info = MPI.INFO_NULL,
                                   reorder: bool = False) -> Comm:
        self._state.not_spare("Create_dist_graph_adjacent")
        return derive(self._state, "Create_dist_graph_adjacent", self,
                      (sources, destinations, sourceweights, destweights, info, reorder))

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


def _warn_not_rebuilt(what: str) -> None:
    if what in _warned:
        return
    _warned.add(what)
    warnings.warn(f"dpmpi: a communicator made with {what} is not rebuilt by a repair; a failure while the program "
                  f"still uses it after the repair can hang the job. Make it inside the step (then it is made again "
                  f"with the survivors) or, where it fits, with Split, Dup, Create, Create_group, Create_cart, "
                  f"Create_dist_graph_adjacent or Create_intercomm of dpmpi.init's communicator (docs/spares.md)",
                  RuntimeWarning, stacklevel=program_level())


class Derived(Tracked):
    """A communicator derived from the active one; rebuilt in place after each repair."""

    def __init__(self, raw: MPI.Comm, index: int, state: State) -> None:
        super().__init__(raw)
        self._index = index
        self._state = state


def derive(state: State, op: str, parent: Tracked, args: tuple) -> Any:
    """``parent.<op>(*args)`` (collective over ``parent``), recorded so that repairs remake it."""
    me = state.logical()
    if parent.mpi.Is_inter() and op not in intercomms.ON_INTER:  # (Split: its allgather is the remote group's)
        _warn_not_rebuilt(f"{op} of an intercommunicator")
        return plain_method(parent, op)(*args[: 1 if op == "Create" else len(args)])
    mine = recipe_args.own_args(op, args, parent.mpi, _active(state))
    at = _answered_at(state, op, parent, me, mine)
    if at is not None:
        place, handle = state.replay.pop(at)  # a replacement catching up: the survivors made this one already
        return handle if handle is not None else _make_late(state, place, op, parent, mine)
    recover = state.prologue.watches_creation() if parent._index < 0 and op in ALL_RANKS else None
    if recover is not None:  # (outside dpmpi.Runtime's runs, one made: a failure there is repaired)
        first = len(state.recipes)

        def made() -> Any:
            return faults.pointed("created", _derive_made(state, op, parent, mine))

        def let_go() -> None:  # (not kept for replacements: every rank makes it again)
            state.pinned.difference_update(range(first, len(state.recipes)))
        watch = state.prologue.setup  # (dpmpi.init's watch of the setup ANDs its bit in)
        agree = watch.agree(creation=True) if recover is watch else plain_method(parent, "Agree")
        return prologue.creation_between_runs(op, made, agree, recover, lambda: derive(state, op, parent, args), let_go)
    return _derive_made(state, op, parent, mine)


def _answered_at(state: State, op: str, parent: Tracked, me: int, mine: Any) -> int | None:
    """Where in ``state.replay`` a replacement's call is answered (None: it is made with the
    survivors): outside dpmpi.Runtime's runs, while the replacement runs again what its
    survivors did there, the first of those made there (pinned), else the first of the others,
    when it matches. One a step made and kept in a run the replacement skipped waits for its own
    step's call (before, it stood at the head, and the evaluation's Split after that run was made
    for real, or answered with it: the job hung). Without a Runtime, likewise in its prologue."""
    catching_up = state.prologue.remakes_survivors_setup()
    at = next((j for j, (place, _h) in enumerate(state.replay) if (place in state.pinned) == catching_up), None)
    if at is None or not replays(state.recipes[state.replay[at][0]], op, parent._index, me, mine):
        return None
    return at


def _derive_made(state: State, op: str, parent: Tracked, mine: Any) -> Any:
    """``derive``'s creation (this rank makes it with the others), recorded first."""
    praw = parent.mpi
    if parent._index < 0 and op != "Create_group" and len(state.live) >= state.compact_at:
        holding.compact(state, praw)  # (collective over every active rank, as Split and Dup are)
    recipe = _recorded(state, op, parent, mine)
    # recorded before it is made: a creation that a death cut short can complete on some ranks
    # and fail on others, and every rank that took part must keep the recipe (the repair agrees
    # on it and gives the communicator back to those it failed on: holding.lost)
    place = len(state.recipes)
    holding.pin_if_outside_runs(state, place)
    state.live.append(place)
    state.recipes.append(recipe)
    state.derived.append(None)
    state.handles.append(None)
    try:
        made = remake.make(recipe, praw, state.logical(), _active(state))
    except BaseException:
        state.unmade.add(place)
        raise
    return _handle(state, place, made)


def _recorded(state: State, op: str, parent: Tracked, mine: Any) -> Recipe:
    """The recipe of this call: a per-rank one's arguments allgathered over ``parent``."""
    if op in PER_RANK:
        try:
            table = exchange(lambda: parent.mpi.allgather((state.logical(), mine)))
        except MPI.Exception as exc:
            raise from_mpi(exc, parent.mpi, op) from exc
        return Recipe(op, parent._index, dict(table))
    return Recipe(op, parent._index, {} if op == "Dup" and mine is None else {-1: mine})


def _handle(state: State, place: int, made: MPI.Comm | None) -> Any:
    """The program's handle of the communicator made at ``place`` (``MPI.COMM_NULL``: none)."""
    if made is None:
        return MPI.COMM_NULL
    result = Derived(made, place, state)
    state.derived[place], state.handles[place] = made, weakref.ref(result)
    return result


def communicators(state: State) -> list[MPI.Comm]:
    """The MPI communicators of this process's derived communicators (those it is a member of and
    has not freed, the ones its program let go of too). A repair revokes them with the active
    one: a peer blocked in a collective on one of them that the failed process is not part of would
    otherwise wait for ever for a member that left it for the repair (seen: a rank in an Allreduce
    on a communicator split by parity, its partner gone to repair after the same iteration's
    Allreduce on the active one failed only for it)."""
    return [raw for raw in state.derived if raw is not None and raw != MPI.COMM_NULL]


def rebuild(state: State, renumber: dict[int, int], fresh: bool, keep: list[bool] | None, remade: Remade) -> None:
    """Adopt the derived communicators that the committed attempt remade (``remake.remake``:
    those still held somewhere, ``keep``; None: no recipes), make those it deferred, and forget
    the others.
    On a replacement (``fresh``) they wait in ``state.replay`` for the program to ask for them;
    elsewhere the program's handles are pointed at the new ones and the old ones go to the
    graveyard."""
    state.recipes, old, later = list(remade.recipes), remade.old, remade.later
    made = remake.finish(remade, state.logical(), _active(state))  # (intercommunicators: after the commit)
    state.prologue.derived.remap(old, renumber)  # (its records of calls on them move with them)
    state.prologue.p2p.remap(old, renumber)  # (and its messages, by communicator and destination)
    state.live, state.compact_at = list(range(len(made))), 2 * len(made) + COMPACT_MIN
    unmade, state.unmade = state.unmade, set()
    # (kept for replacements, agreed: not given back to a survivor; a replacement's calls outside
    # the runs are answered with these, those in its steps with the others: _answered_at)
    pinned = {o for o in old if keep[o] & holding.PINNED}
    state.pinned = {i for i, o in enumerate(old) if o in pinned}
    if fresh:
        handles = [None if i in later else MPI.COMM_NULL if raw is None else Derived(raw, i, state)
                   for i, raw in enumerate(made)]
        state.derived = made
        state.handles = [None if raw is None else weakref.ref(h) for raw, h in zip(made, handles)]
        state.replay = list(enumerate(handles))
        return
    # (a replacement still catching up: what it has not been handed yet is held, so kept)
    state.replay = [(old.index(i), h) for i, h in state.replay if i in old]
    waiting = {i for i, _ in state.replay}
    replaced = [raw for raw in state.derived if raw is not None]  # (kept and forgotten ones)
    refs = [state.handles[i] for i in old]
    for i, (ref, raw) in enumerate(zip(refs, made)):
        handle = ref() if ref is not None else None
        if handle is None:
            if raw is not None and i not in waiting and old[i] not in pinned and holding.lost(state.derived[old[i]],
                                                                                           old[i] in unmade):
                handle = Derived(raw, i, state)  # (given back at the program's next call that makes it)
                refs[i] = weakref.ref(handle)
                state.replay.append((i, handle))
            continue
        gone = rebind(handle, MPI.COMM_NULL if raw is None else raw)
        handle._index = i
        if handle.mpi is not raw:  # the program's mpi4py object took raw's handle; raw holds the old one
            replaced = [r for r in replaced if r is not handle.mpi] + [gone]
            made[i] = handle.mpi
    state.replay.sort(key=lambda entry: entry[0])
    state.graveyard.extend(replaced)
    state.derived = made
    state.handles = [None if raw is None else ref for ref, raw in zip(refs, made)]


def _make_late(state: State, place: int, op: str, parent: Tracked, mine: Any) -> Any:
    """Make the derived communicator at ``place`` now that the program asks for it: every
    process that knew how this rank's instance of it was made died in the repair that gave this
    replacement its place (``unknown_to_survivors``; or one derived from such), so its members,
    all replacements, make it together here and record what they brought."""
    state.recipes[place] = _recorded(state, op, parent, mine)
    return _handle(state, place, remake.make(state.recipes[place], parent.mpi, state.logical(), _active(state)))


def _active(state: State) -> MPI.Comm:
    assert state.active is not None
    return state.active.mpi
