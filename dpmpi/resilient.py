"""Hot swap: spare ranks take a failed rank's place, so the program keeps its rank numbers.

``dpmpi.init(spares=S)`` (collective over COMM_WORLD) makes the last S world ranks spares and
returns the *active* communicator to the others. Each process has a fixed identity, its world
rank ("wid"); each active process also has a *logical rank*, its rank in the active
communicator. ``comm.Respawn()`` (collective over the surviving actives, and the idle spares,
which join by themselves) rebuilds the active communicator with a spare in each failed
logical rank's place.

The protocol, run by every live process of the job:

1. revoke the active communicator and the job-wide protocol communicator ("world"), so that
   every active rank leaves what it was doing and every idle spare wakes up;
2. shrink the protocol communicator (actives and spares; the dead drop out);
3. allgather what each process knows (identity, the committed plan, derived-communicator
   recipes) and compute the new plan, a pure function of that (``plan_repair``): failed
   logical ranks are filled from the idle spares in order; when there are too few, the
   ``on_depleted`` policy decides ("shrink": continue with fewer, renumbered ranks;
   "abort": ``SparesDepletedError``);
4. split the new active communicator (key = logical rank) and rebuild the derived ones;
5. agree (the commit point). Any failure before the commit restarts at 1 with the newest
   protocol communicator: a failure during repair (an active rank, an idle spare, or the spare
   being swapped in) is simply one more dead process for the next attempt.

An idle spare waits without spinning: it polls (with sleeps) a receive from itself on the
protocol communicator, which only a revoke completes, and its exit agreement on COMM_WORLD,
which completes when every active rank has ended; then it exits with status 0 without running
user code.
"""
from __future__ import annotations

import array
import contextlib
import ctypes
import enum
import json
import os
import sys
import threading
import time
import warnings
import weakref
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterator, NamedTuple

from mpi4py import MPI

from dpmpi import _guard, config, faults, interrupts, watcher
from dpmpi.comm import Comm, _warm_up
from dpmpi.errors import PEER_FAILURE_CLASSES, DpmpiError, ProcFailedError, from_mpi

ENV_SPARES = "DPMPI_SPARES"
ENV_ON_DEPLETED = "DPMPI_ON_DEPLETED"
ENV_EVENTS = "DPMPI_EVENTS"
ENV_SPARE_POLL = "DPMPI_SPARE_POLL"
ENV_REPAIR_TIMEOUT = "DPMPI_REPAIR_TIMEOUT"  # seconds a Respawn may take before the process gives up
ENV_SPAWNED = "DPMPI_SPAWNED"  # set for the processes that policy "respawn" starts
POLICIES = ("shrink", "abort", "respawn")
_WAKE_TAG = 31_337
_MAX_ATTEMPTS = 64


class Role(enum.Enum):
    INITIAL = "INITIAL"  # has not lived through a repair
    SURVIVOR = "SURVIVOR"  # lived through at least one repair
    RECOVERED = "RECOVERED"  # a spare that took a failed rank's place
    SPARE = "SPARE"  # a spare not called in yet (dpmpi.init(wait=False)): see ResilientComm.Await


class SparesDepletedWarning(UserWarning):
    """Not enough spares: the job continues with fewer ranks (policy "shrink")."""


class SparesDepletedError(DpmpiError):
    """Not enough spares and the policy is "abort"."""


class Filled(NamedTuple):
    """How a repair filled a failed logical rank's place."""

    how: str  # "spare" (an idle spare took it), "respawn" (a process started by the repair) or "dropped"
    process_id: int  # the process that took the place (-1 when dropped)


@dataclass
class RepairEvent:
    """One repair as seen by one process."""

    repair: int  # how many repairs the job went through, this one included
    rank: int  # logical rank after the repair (-1: this process stays a spare)
    process_id: int  # this process's identity (ResilientComm.process_id)
    role: str
    failed: list[int]  # logical ranks (before the repair) that failed
    filled: dict[int, Filled]  # failed logical rank -> how its place was filled
    renumber: dict[int, int]  # logical rank before -> after, for every rank that keeps a place
    size: int  # size of the active communicator after the repair
    attempts: int
    detected_at: float  # time.time() when this process saw the failure (or joined)
    phases_ms: dict[str, float] = field(default_factory=dict)  # revoke, shrink, agree, reassign, rebuild
    total_ms: float = 0.0
    repaired_at: float = 0.0  # time.time() when this process held the usable new communicator


@dataclass(frozen=True)
class Plan:
    """Who holds which logical rank; the same on every process after each commit."""

    repairs: int  # how many repairs led to this plan
    actives: tuple[int, ...]  # actives[logical rank] = wid
    spares: tuple[int, ...]  # idle spares' wids, in the order they will be used
    next_wid: int = -1  # the identity the next spawned process gets (policy "respawn")


def plan_repair(plan: Plan, alive: set[int], policy: str) -> tuple[Plan, list[int], dict[int, Filled], dict[int, int]]:
    """The next plan when only the wids in ``alive`` live. Pure: every process computes the
    same result from the same inputs.

    Returns (new plan, failed logical ranks, how each was filled, old logical -> new logical
    for the ranks that keep a place). Raises SparesDepletedError under policy "abort"."""
    failed = [lr for lr, wid in enumerate(plan.actives) if wid not in alive]
    spares = [wid for wid in plan.spares if wid in alive]
    known = set(plan.actives) | set(plan.spares)
    # processes spawned by an attempt that did not commit are alive but unknown: spares now
    spares += sorted(wid for wid in alive if wid not in known)
    next_wid = max([plan.next_wid, *(w + 1 for w in known | alive)])
    actives = list(plan.actives)
    filled: dict[int, Filled] = {}
    for lr in failed:
        if spares:
            wid = spares.pop(0)
            actives[lr] = wid
            filled[lr] = Filled("spare", wid)
        elif policy == "respawn":  # a new process (Comm.Spawn) takes the place
            actives[lr] = next_wid
            filled[lr] = Filled("respawn", next_wid)
            next_wid += 1
        else:
            filled[lr] = Filled("dropped", -1)
    dropped = [lr for lr in failed if filled[lr].how == "dropped"]
    if dropped and policy == "abort":
        raise SparesDepletedError(
            f"logical rank(s) {dropped} failed and no spare is left to replace them (policy 'abort'). "
            f"Launch with more spares (dpmpi-run --spares S), or use on_depleted='shrink'.",
            MPI.ERR_PROC_FAILED,
            tuple(dropped),
        )
    kept = [(lr, wid) for lr, wid in enumerate(actives) if lr not in dropped]
    renumber = {old: new for new, (old, _wid) in enumerate(kept)}
    new_plan = Plan(plan.repairs + 1, tuple(wid for _lr, wid in kept), tuple(spares), next_wid)
    return new_plan, failed, filled, renumber


class _Decision(NamedTuple):
    """What the attempt of a repair that committed decided (on this process)."""

    attempt: int
    alive: set[int]  # wids alive at the shrink
    base: Plan  # the newest plan any process held
    plan: Plan  # the committed plan
    failed: list[int]
    filled: dict[int, Filled]
    renumber: dict[int, int]
    me: int  # this process's logical rank in the new plan (-1: a spare)
    raw: MPI.Comm  # the new active communicator (COMM_NULL on a spare)
    recipes: list  # derived-communicator recipes (for a replacement)


# ---- derived communicators -------------------------------------------------------------------
@dataclass
class _Recipe:
    """How a derived communicator was made, keyed by *logical* rank (rank in the active
    communicator), so that it can be remade after a repair, on a replacement too."""

    op: str  # "Split", "Dup" or "Create_group"
    parent: int  # index of the parent recipe, -1 for the active communicator
    args: dict[int, Any]  # Split: logical -> (color, key); Create_group: {-1: (logical members, tag)}

    def renumbered(self, renumber: dict[int, int]) -> _Recipe:
        if self.op == "Split":
            args = {renumber[lr]: v for lr, v in self.args.items() if lr in renumber}
        elif self.op == "Create_group":
            members, tag = self.args[-1]
            args = {-1: (tuple(renumber[m] for m in members if m in renumber), tag)}
        else:
            args = dict(self.args)
        return _Recipe(self.op, self.parent, args)


class _Tracked(Comm):
    """A communicator whose derived communicators dpmpi tracks and rebuilds after repairs."""

    _state: _State

    def Split(self, color: int = 0, key: int = 0) -> Comm:
        self._state.not_spare("Split")
        return self._state.derive("Split", self, (color, key))

    def Dup(self) -> Comm:
        self._state.not_spare("Dup")
        return self._state.derive("Dup", self, ())

    def Create_group(self, group: MPI.Group, tag: int = 0) -> Comm:
        self._state.not_spare("Create_group")
        return self._state.derive("Create_group", self, (group, tag))

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

    def _rebase(self, raw: MPI.Comm) -> None:
        """Point this handle at the rebuilt communicator, so the program's handles stay valid."""
        keep = {k: v for k, v in self.__dict__.items() if k.startswith("_")}  # not the cached methods
        self.__dict__.clear()
        self.__dict__.update(keep, _comm=raw)


class _Derived(_Tracked):
    """A communicator derived from the active one; rebuilt in place after each repair."""

    def __init__(self, raw: MPI.Comm, index: int, state: _State) -> None:
        super().__init__(raw)
        self._index = index
        self._state = state


class ResilientComm(_Tracked):
    """The active communicator returned by ``dpmpi.init``: repairable with ``Respawn()``."""

    def __init__(self, raw: MPI.Intracomm, state: _State) -> None:
        super().__init__(raw)
        self._state = state

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("_"):
            self._state.not_spare(name)
        return super().__getattr__(name)

    @property
    def role(self) -> Role:
        return self._state.role

    @property
    def process_id(self) -> int:
        """This process's identity in the job: its rank in MPI.COMM_WORLD, or, for a process
        started by a repair under policy "respawn", the id that repair gave it."""
        return self._state.wid

    @property
    def active_size(self) -> int:
        """The number of active ranks (on a waiting spare too: the size it will join)."""
        return len(self._state.plan.actives)

    @interrupts.uninterrupted
    def Await(self) -> ResilientComm:
        """On a spare from ``dpmpi.init(wait=False)``: wait (without spinning) until this process
        takes a failed rank's place, then return this communicator, now active
        (``role is Role.RECOVERED``); if the job ends first, the process exits with status 0.
        On an active rank: returns at once."""
        if self._state.role is Role.SPARE:
            self._state.wait_as_spare()
        return self

    @property
    def repairs(self) -> int:
        """How many repairs this job went through (the same on every active rank)."""
        return self._state.plan.repairs


    @property
    def history(self) -> list[RepairEvent]:
        """The repairs this process took part in."""
        return list(self._state.history)

    def on_repair(self, callback: Callable[[RepairEvent], None]) -> None:
        """Call ``callback(event)`` on this process after each repair it takes part in."""
        if not callable(callback):
            raise TypeError(f"on_repair() takes a callable(event), got {type(callback).__name__}")
        self._state.callbacks.append(callback)

    @interrupts.uninterrupted
    def Respawn(self) -> ResilientComm:
        """Repair after a ProcFailedError/RevokedError: a spare takes each failed rank's place.

        Collective over the surviving active ranks (idle spares join by themselves). Returns
        this communicator, rebuilt in place: same rank numbers and size, unless spares ran out
        under policy "shrink". Derived communicators (Split, Dup, Create_group) are rebuilt in
        place too."""
        self._state.not_spare("Respawn")
        self._state.repair(time.time())
        return self



class Listeners:
    """The repair listeners of one process, weakly held, in registration order. Owned by the
    process's state; touched only by the main thread (registration and repairs)."""

    def __init__(self) -> None:
        self._refs: list[weakref.ref] = []

    def add(self, listener: Any) -> None:
        if not any(obj is listener for obj in self.snapshot()):
            self._refs.append(weakref.ref(listener))

    def discard(self, listener: Any) -> None:
        self._refs = [r for r in self._refs if r() is not None and r() is not listener]

    def snapshot(self) -> list[Any]:
        """The live listeners now (a repair iterates over this copy)."""
        live = [r() for r in self._refs]
        self._refs = [r for r, obj in zip(self._refs, live) if obj is not None]
        return [obj for obj in live if obj is not None]


class _State:
    """Everything one process knows about the job's composition."""

    def __init__(self, world: MPI.Intracomm, plan: Plan, policy: str, poll: float) -> None:
        self.world = world  # protocol communicator: every live process (actives and spares)
        self.plan = plan
        self.policy = policy
        self.poll = poll
        self.wid = MPI.COMM_WORLD.Get_rank()
        self.role = Role.INITIAL
        self.history: list[RepairEvent] = []
        self.callbacks: list[Callable[[RepairEvent], None]] = []
        self.recipes: list[_Recipe] = []
        self.derived: list[_Derived | MPI.Comm] = []  # MPI.COMM_NULL where this rank is not a member
        self.replay: list[_Derived | MPI.Comm] = []  # prebuilt for a replacement, served in creation order
        self.active: ResilientComm | None = None
        self.graveyard: list[MPI.Comm] = []  # replaced communicators, freed after the next commit
        self.exit_flag = array.array("i", [1])
        self.exit_req: MPI.Request | None = None
        # objects with their own communicators and MPI threads (snapshots, the failure watcher,
        # NCCL communicators): told before a repair's first MPI call and after it commits
        self.listeners = Listeners()
        self.intercomms: list[MPI.Intercomm] = []  # to processes spawned by repairs
        # wid -> (node, CPUs) of the place it holds: where it was bound at start, or the place of
        # the rank it replaced (a replacement takes that rank's CPUs when on the same node)
        self.cpus: dict[int, tuple[str, tuple[int, ...]]] = {}
        self.procs: dict[int, watcher.Ident] = {}  # wid -> where it runs (for the failure watcher)
        self.watch_mode = watcher.Mode(False, False)  # decided at init, the same everywhere
        self.watcher: watcher.Watcher | None = None

    def not_spare(self, what: str) -> None:
        if self.role is Role.SPARE:
            raise RuntimeError(f"comm.{what}: this process is a spare that has not been called in yet; "
                               f"call comm.Await() first (dpmpi.Runtime.run does)")

    # -- identities --
    def logical(self) -> int:
        try:
            return self.plan.actives.index(self.wid)
        except ValueError:
            return -1

    # -- derived communicators --
    def derive(self, op: str, parent: Comm, args: tuple) -> Any:
        if self.replay:  # a replacement catching up: the survivors made this one already
            return self.replay.pop(0)
        parent_index = -1 if isinstance(parent, ResilientComm) else parent._index
        praw, me = parent.mpi, self.logical()
        if op == "Split":
            color, key = args
            if color != MPI.UNDEFINED and (isinstance(color, bool) or not isinstance(color, int) or color < 0):
                raise ValueError(f"Split color must be an int >= 0 or MPI.UNDEFINED, got {color!r}")
            if isinstance(key, bool) or not isinstance(key, int):
                raise TypeError(f"Split key must be an int, got {key!r}")
            try:
                table = praw.allgather((me, color, key))
            except MPI.Exception as exc:
                raise from_mpi(exc, praw, "Split") from exc
            recipe = _Recipe(op, parent_index, {lr: (c, k) for lr, c, k in table})
        elif op == "Dup":
            recipe = _Recipe(op, parent_index, {})
        else:
            group, tag = args
            if not isinstance(group, MPI.Group):
                raise TypeError(f"Create_group takes an MPI.Group, got {type(group).__name__}")
            agroup = self.active.mpi.Get_group()
            members = MPI.Group.Translate_ranks(group, list(range(group.Get_size())), agroup)
            agroup.Free()
            recipe = _Recipe(op, parent_index, {-1: (tuple(members), tag)})
        made = self._make(recipe, praw)
        self.recipes.append(recipe)
        result = MPI.COMM_NULL if made is None else _Derived(made, len(self.recipes) - 1, self)
        self.derived.append(result)
        return result

    def _make(self, recipe: _Recipe, praw: MPI.Intracomm) -> MPI.Intracomm | None:
        me = self.logical()
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
                agroup, pgroup = self.active.mpi.Get_group(), praw.Get_group()
                local = MPI.Group.Translate_ranks(agroup, list(members), pgroup)
                g = pgroup.Incl(local)
                raw = praw.Create_group(g, tag)
                for x in (g, agroup, pgroup):
                    x.Free()
        except MPI.Exception as exc:
            raise from_mpi(exc, praw, recipe.op) from exc
        if raw == MPI.COMM_NULL:
            return None
        _warm_up(raw, recipe.op)
        return raw

    def _rebuild_derived(self, recipes: list[_Recipe], renumber: dict[int, int], fresh: bool) -> None:
        """Remake every derived communicator on the new active one (same colours and keys).
        On a replacement (``fresh``) they wait in ``replay`` for the program to ask for them."""
        self.recipes = [r.renumbered(renumber) for r in recipes]
        made: list[MPI.Comm | None] = []
        for recipe in self.recipes:
            praw = self.active.mpi if recipe.parent < 0 else made[recipe.parent]
            made.append(None if praw is None else self._make(recipe, praw))
        if fresh:
            self.derived = [MPI.COMM_NULL if raw is None else _Derived(raw, i, self) for i, raw in enumerate(made)]
            self.replay = list(self.derived)
            return
        for old, raw in zip(self.derived, made):
            if isinstance(old, _Derived):
                self.graveyard.append(old.mpi)
                old._rebase(MPI.COMM_NULL if raw is None else raw)

    def _bury(self) -> None:
        """Free the communicators that the committed repair replaced."""
        for comm in self.graveyard:
            _free(comm)
        self.graveyard.clear()

    # -- respawn --
    def _spawn(self, comm: MPI.Intracomm, wids: list[int], base: Plan, plan: Plan, recipes: list,
               renumber: dict[int, int], outcome: tuple) -> MPI.Intracomm:
        """Start len(wids) new processes running this program (collective over ``comm``); they
        join in ``dpmpi.init`` (``_join_spawned``). Returns the new protocol communicator: the
        live processes, then the new ones."""
        info = MPI.Info.Create()
        # a replacement must not repeat the faults planned for the first life of the job's ranks
        info.Set("PMIX_ENVAR", "\n".join(f"{k}={v}" for k, v in _spawn_env().items()))
        # Room for the new processes whatever the launch options: mpirun refuses a spawn into a
        # job that fills its slots (a dead rank's slot is not given back), or one that would
        # bind a process to a core already in use without overload-allowed. Unbound here, the
        # new process takes the failed rank's CPUs itself (_join_spawned).
        info.Set("PMIX_MAPBY", ":OVERSUBSCRIBE")
        info.Set("PMIX_BINDTO", "none")
        try:
            inter = comm.Spawn(sys.executable, args=_program_args(), maxprocs=len(wids), info=info, root=0)
        finally:
            info.Free()
        merged = inter.Merge(high=False)
        _warm_up(merged, "Spawn")
        merged.bcast((wids, base, plan, recipes, renumber, self.policy, self.poll, outcome, self.cpus), root=0)
        # where everyone runs (the children's failure watchers, and ours for the children)
        table = merged.allgather((self.wid, watcher.identity(), self.watch_mode))
        self.procs.update({wid: watcher.Ident(*ident) for wid, ident, _m in table})
        self.intercomms.append(inter)  # kept: freeing an intercommunicator to live children may block
        return merged

    # -- the spare's wait --
    def post_exit_agreement(self) -> None:
        self.exit_req = MPI.COMM_WORLD.Iagree(self.exit_flag)
        # The request must outlive the interpreter: dpmpi's C exit handler finishes it.
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(self.exit_req))
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(self.exit_flag))
        _guard.adopt_exit_agreement(MPI._handleof(self.exit_req))

    def wait_as_spare(self) -> None:
        """Block (without spinning) until called in, or until the job ends (then exit)."""
        faults.point("spare")  # lets tests kill an idle spare
        wake_buf = bytearray(1)
        wake = self.world.Irecv(wake_buf, source=self.world.Get_rank(), tag=_WAKE_TAG)
        wall0, cpu0 = time.perf_counter(), time.process_time()
        while True:
            try:
                if self.exit_req.Test():  # every active rank ended: nothing to do
                    wall = time.perf_counter() - wall0
                    _log_line({"event": "spare-exit", "wid": self.wid, "idle_s": round(wall, 3),
                               "cpu_fraction": round((time.process_time() - cpu0) / wall, 4) if wall > 0 else 0.0})
                    _guard.exit_after_agreement(0)
            except MPI.Exception:
                MPI.COMM_WORLD.Ack_failed()  # a process died; agree again (as the exit path does)
                self.post_exit_agreement()
            try:
                if wake.Test():
                    raise RuntimeError("dpmpi: unexpected message to an idle spare")
            except MPI.Exception as exc:
                if exc.Get_error_class() != MPI.ERR_REVOKED:
                    raise
                self.repair(time.time())
                if self.logical() >= 0:
                    return
                wake = self.world.Irecv(wake_buf, source=self.world.Get_rank(), tag=_WAKE_TAG)
            time.sleep(self.poll)

    # -- the repair --
    def repair(self, detected_at: float) -> None:
        was_active = self.logical() >= 0
        t0 = time.perf_counter()
        phases = {"revoke": 0.0, "shrink": 0.0, "agree": 0.0, "reassign": 0.0, "rebuild": 0.0}
        old_plan = self.plan
        with _WATCHDOG.armed(_repair_timeout(), "Respawn"):
            decided = self._attempts(was_active, phases)
        self._commit(was_active, old_plan, decided, phases, t0, detected_at)

    def _attempts(self, was_active: bool, phases: dict[str, float]) -> _Decision:
        """Repair attempts until one commits; returns what it decided."""
        for attempt in range(1, _MAX_ATTEMPTS + 1):
            raw = MPI.COMM_NULL
            t = time.perf_counter()
            for listener in self.listeners.snapshot():  # first: their threads must stop calling MPI
                listener.repair_begins()
            if self.active is not None and was_active:
                _revoke(self.active.mpi)
            _revoke(self.world)
            phases["revoke"] += time.perf_counter() - t
            faults.point("repair")  # lets tests fail a process in the middle of a repair
            try:
                # one fault point per phase (repair-PHASE): a process that dies there leaves the
                # others inside that phase's collective (tests prove each phase survives it)
                faults.point("repair-shrink")
                t = time.perf_counter()
                new_world = self.world.Shrink()
                _warm_up(new_world, "Shrink")
                phases["shrink"] += time.perf_counter() - t
                self.graveyard.append(self.world)
                self.world = new_world
                faults.point("repair-reassign")
                t = time.perf_counter()
                mine = (self.wid, self.plan, self.recipes if was_active else None)
                infos = new_world.allgather(mine)
                alive = {wid for wid, _p, _r in infos}
                base = max((p for _w, p, _r in infos), key=lambda p: p.repairs)
                recipes = next((r for _w, _p, r in infos if r is not None), [])
                new_plan, failed, filled, renumber = plan_repair(base, alive, self.policy)
                phases["reassign"] += time.perf_counter() - t
                born = [f.process_id for f in filled.values() if f.how == "respawn"]
                if born:  # spares ran out under policy "respawn": new processes join the world
                    faults.point("repair-spawn")
                    t = time.perf_counter()
                    # Comm.Spawn is not fault tolerant in Open MPI 5.0.11: a parent that is dead when
                    # it starts leaves the others inside it until the repair deadline. An agreement
                    # first turns a death since the shrink into a failed attempt (uniformly);
                    # a death during the spawn itself still ends in the deadline (README).
                    new_world.Agree(1)
                    faults.point("repair-spawning")
                    new_world = self._spawn(new_world, born, base, new_plan, recipes or self.recipes, renumber,
                                            (failed, filled))
                    self.graveyard.append(self.world)
                    self.world = new_world
                    phases["spawn"] = phases.get("spawn", 0.0) + time.perf_counter() - t
                faults.point("repair-split")
                t = time.perf_counter()
                me = new_plan.actives.index(self.wid) if self.wid in new_plan.actives else -1
                raw = new_world.Split(0 if me >= 0 else MPI.UNDEFINED, me)
                if raw != MPI.COMM_NULL:
                    _warm_up(raw, "Split")
                phases["rebuild"] += time.perf_counter() - t
                faults.point("repair-agree")
                t = time.perf_counter()
                new_world.Agree(1)  # the commit point: raises if a process of new_world failed
                phases["agree"] += time.perf_counter() - t
            except SparesDepletedError:
                raise
            except MPI.Exception as exc:  # dpmpi's errors are MPI.Exceptions too
                if exc.Get_error_class() in PEER_FAILURE_CLASSES:
                    self.graveyard.append(raw)  # this attempt's communicator, if it got that far
                    continue  # another failure during the repair: start again
                raise from_mpi(exc, self.world, "Respawn") from exc
            break
        else:
            raise ProcFailedError(f"Respawn did not converge in {_MAX_ATTEMPTS} attempts", MPI.ERR_PROC_FAILED)
        return _Decision(attempt, alive, base, new_plan, failed, filled, renumber, me, raw, recipes)

    def _commit(self, was_active: bool, old_plan: Plan, decided: _Decision, phases: dict[str, float], t0: float,
                detected_at: float) -> None:
        """Adopt the committed plan: the new active communicator, derived ones, the event."""
        attempt, alive, base, new_plan, failed, filled, renumber, me, raw, recipes = decided
        _guard.note_recovered([wid for wid in old_plan.actives + old_plan.spares if wid not in alive])
        if me >= 0 and not was_active:
            _adopt_cpus(_cpus_of_place(self.cpus, base, filled, self.wid))
        _inherit_cpus(self.cpus, base, filled)
        self.plan = new_plan
        _guard.set_idle_spares(list(new_plan.spares))
        t = time.perf_counter()
        if me >= 0:
            if self.active is None:
                self.active = ResilientComm(raw, self)
            else:
                if was_active:  # (a waiting spare's placeholder wraps COMM_SELF: nothing to free)
                    self.graveyard.append(self.active.mpi)
                self.active._rebase(raw)
            self._rebuild_derived(self.recipes if was_active else recipes, renumber, fresh=not was_active)
            self.role = Role.SURVIVOR if was_active else Role.RECOVERED
        if self.watcher is not None:  # the new set of peers (and, with ULFM, a new communicator)
            self.watcher.rearm()
        self._bury()
        phases["rebuild"] += time.perf_counter() - t
        dropped = [lr for lr, f in filled.items() if f.how == "dropped"]
        event = RepairEvent(
            repair=new_plan.repairs, rank=me, process_id=self.wid, role=self.role.value if me >= 0 else "SPARE",
            failed=failed, filled=filled, renumber=renumber, size=len(new_plan.actives), attempts=attempt,
            detected_at=detected_at,
            phases_ms={k: round(1e3 * v, 3) for k, v in phases.items()},
            total_ms=round(1e3 * (time.perf_counter() - t0), 3), repaired_at=time.time(),
        )
        self.history.append(event)
        _log_line({"event": "repair", **asdict(event)})
        if dropped and me >= 0:
            warnings.warn(
                f"dpmpi: no spare left for logical rank(s) {dropped}; continuing with {event.size} ranks "
                f"(renumbered; policy 'shrink')", SparesDepletedWarning, stacklevel=3)
        if me >= 0:
            for listener in self.listeners.snapshot():
                listener.repair_done(event)
            for cb in list(self.callbacks):
                cb(event)


def _program_args() -> list[str]:
    """The arguments that start this program again (for Comm.Spawn, with sys.executable)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name and spec.name != "__main__":  # python -m module
        return ["-m", spec.name.removesuffix(".__main__"), *sys.argv[1:]]
    return list(sys.argv)


def _spawn_env() -> dict[str, str]:
    env = {ENV_SPAWNED: "1", faults.ENV_REPLACEMENT: "1"}
    for key in ("PYTHONPATH", "DPMPI_STATUS", ENV_EVENTS, "DPMPI_SPARE_POLL", ENV_ON_DEPLETED, watcher.ENV_WATCH,
                watcher.ENV_ULFM, watcher.ENV_PIDFD, watcher.ENV_POLL, watcher.ENV_SIGNAL):
        if os.environ.get(key):  # passed on untouched (validated where they are read)
            env[key] = os.environ[key]
    return env


def _join_spawned() -> _State:
    """In a process started by a repair under policy "respawn": join the job, take the place the
    repair assigned, and return the state (the mirror of the parents' side of ``repair``)."""
    t0 = time.perf_counter()
    parent = MPI.Comm.Get_parent()
    try:
        merged = parent.Merge(high=True)
        _warm_up(merged, "Spawn")
        wids, base, plan, recipes, renumber, policy, poll, (failed, filled), cpus = merged.bcast(None, root=0)
        table = merged.allgather((wids[MPI.COMM_WORLD.Get_rank()], watcher.identity(), None))
    except MPI.Exception as exc:
        raise from_mpi(exc, parent, "dpmpi.init (spawned)") from exc
    state = _State(merged, base, policy, poll)
    state.wid = wids[MPI.COMM_WORLD.Get_rank()]
    state.cpus = cpus
    state.cpus[state.wid] = _my_place()  # until this process takes a place (as a spare, if this attempt fails)
    state.procs = {wid: watcher.Ident(*ident) for wid, ident, _m in table}
    state.watch_mode = next(watcher.Mode(*m) for _w, _i, m in table if m is not None)  # the parents'
    state.watcher = watcher.start(state, state.watch_mode)
    _guard.set_record_rank(state.wid)
    me = plan.actives.index(state.wid)
    raw = MPI.COMM_NULL
    try:
        raw = merged.Split(0, me)
        _warm_up(raw, "Split")
        merged.Agree(1)  # the parents' commit
    except MPI.Exception as exc:
        if exc.Get_error_class() not in PEER_FAILURE_CLASSES:
            raise from_mpi(exc, merged, "dpmpi.init (spawned)") from exc
        # a failure during the repair that started us: join its next attempt like a new spare
        _free(raw)
        if state.watcher is not None:
            state.watcher.rearm()  # nothing to watch yet (not active)
        state.repair(time.time())
        if state.logical() < 0:  # not needed after all; there is no job-wide end to wait for
            _guard.exit_after_agreement(0)
        return state
    state.plan = plan
    _adopt_cpus(_cpus_of_place(state.cpus, base, filled, state.wid))
    _inherit_cpus(state.cpus, base, filled)
    state.active = ResilientComm(raw, state)
    state._rebuild_derived(recipes, renumber, fresh=True)
    state.role = Role.RECOVERED
    if state.watcher is not None:  # as the parents do in _commit
        state.watcher.rearm()
    _guard.set_idle_spares(list(plan.spares))
    event = RepairEvent(repair=plan.repairs, rank=me, process_id=state.wid, role=Role.RECOVERED.value,
                        failed=failed, filled=filled, renumber=renumber, size=len(plan.actives), attempts=1,
                        detected_at=time.time(), phases_ms={}, total_ms=round(1e3 * (time.perf_counter() - t0), 3),
                        repaired_at=time.time())
    state.history.append(event)
    _log_line({"event": "repair", **asdict(event)})
    return state


def _repair_timeout() -> float:
    return float(config.get(ENV_REPAIR_TIMEOUT))


class _Watchdog:
    """Bounds a repair: a Respawn that a further failure leaves stuck inside MPI (seen: every
    survivor inside Shrink's agreement, forever, when a peer's exit was never reported as a
    failure) ends this process as a failure after ``DPMPI_REPAIR_TIMEOUT`` seconds, with a status
    record, instead of hanging the job. (Ishrink, which would let the caller poll, fails with
    ERR_INTERN on a revoked communicator in Open MPI 5.0.11.)

    Owner and lifetime: one daemon thread per process, started by the first repair, never
    touches MPI; it sleeps on a condition until a deadline is armed, and only acts if that
    deadline passes before the repair disarms it."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._deadline: float | None = None
        self._what = ""
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def armed(self, seconds: float, what: str) -> Iterator[None]:
        with self._cv:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="dpmpi-repair-watchdog", daemon=True)
                self._thread.start()
            self._deadline, self._what = time.monotonic() + seconds, f"{what} did not complete within {seconds:g} s"
            self._cv.notify()
        try:
            yield
        finally:
            with self._cv:
                self._deadline = None

    def _run(self) -> None:
        while True:
            with self._cv:
                if self._deadline is None:
                    self._cv.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._cv.wait(left)
                    continue
                self._deadline, what = None, self._what
            _guard.die(1, f"{what} ({ENV_REPAIR_TIMEOUT}); a further failure left it stuck")  # does not return


_WATCHDOG = _Watchdog()


def _my_place() -> tuple[str, tuple[int, ...]]:
    """This process's node and the CPUs it may run on."""
    cpus = tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else ()
    return MPI.Get_processor_name(), cpus


def _cpus_of_place(places: dict[int, tuple[str, tuple[int, ...]]], base: Plan, filled: dict[int, Filled],
                   wid: int) -> tuple[int, ...] | None:
    """The CPUs that process ``wid`` takes in a repair: those of the failed rank whose place it
    fills (as a spare or a respawned process), if that rank ran on the same node; else None."""
    for logical, f in filled.items():
        if f.how != "dropped" and f.process_id == wid:
            failed = places.get(base.actives[logical])
            mine = places.get(wid)
            if failed and (mine is None or mine[0] == failed[0]):
                return failed[1]
    return None


def _inherit_cpus(places: dict[int, tuple[str, tuple[int, ...]]], base: Plan, filled: dict[int, Filled]) -> None:
    """After a repair, a process that filled a failed rank's place holds that place's CPUs (so a
    later replacement of it takes them in turn)."""
    for logical, f in filled.items():
        failed = places.get(base.actives[logical])
        if f.how != "dropped" and failed and (f.process_id not in places or places[f.process_id][0] == failed[0]):
            places[f.process_id] = failed


def _adopt_cpus(cpus: tuple[int, ...] | None) -> None:
    """Take the CPUs of the rank this process replaces (every thread of it), so that a spare
    that waited on a shared core does not leave the failed rank's core idle."""
    if not cpus or not hasattr(os, "sched_setaffinity"):
        return
    try:
        if set(cpus) == os.sched_getaffinity(0):
            return
        for tid in os.listdir("/proc/self/task"):
            try:
                os.sched_setaffinity(int(tid), cpus)
            except OSError:
                pass  # a thread that ended meanwhile, or CPUs this process may not use
    except OSError:
        pass


def _free(comm: MPI.Comm) -> None:
    try:
        if comm != MPI.COMM_NULL:
            comm.Free()
    except MPI.Exception:
        pass  # a communicator that cannot be freed any more is only a small leak


def _revoke(comm: MPI.Comm) -> None:
    try:
        comm.Revoke()
    except MPI.Exception:
        pass  # already revoked, or unusable: the shrink that follows decides


def _log_line(record: dict) -> None:
    path = config.raw(ENV_EVENTS)
    if not path:
        return
    line = (json.dumps(record) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line)  # one write of a short line with O_APPEND: lines do not interleave
    finally:
        os.close(fd)


_STATE: _State | None = None


def _spares_from(value: int | None, size: int) -> int:
    if value is None:
        value = config.get(ENV_SPARES)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"spares must be an int, got {type(value).__name__}")
    if value < 0 or value >= size:
        raise ValueError(f"spares={value} with {size} processes: need 0 <= spares < {size} (at least one active rank)")
    return value


def _policy_from(value: str | None) -> str:
    value = value if value is not None else config.get(ENV_ON_DEPLETED)
    if value not in POLICIES:
        raise ValueError(f"on_depleted must be one of {POLICIES}, got {value!r}")
    return value


def init(spares: int | None = None, on_depleted: str | None = None, *, wait: bool = True) -> ResilientComm:
    """Split COMM_WORLD into active ranks and spares; return the active communicator.

    Collective over COMM_WORLD. The last ``spares`` world ranks (default: ``DPMPI_SPARES``, set
    by ``dpmpi-run --spares``, else 0) become spares: on them this call returns only when the
    spare takes a failed rank's place (``comm.role is Role.RECOVERED``), or never (the process
    exits with status 0 when the job ends). With ``wait=False`` a spare gets its communicator at
    once, with ``role is Role.SPARE``: it can build its state (arrays, snapshot memory) while it
    waits, so that taking over costs less; ``comm.Await()`` (or ``dpmpi.Runtime.run``) then
    waits. ``on_depleted`` ("shrink", the default, or "abort"; also ``DPMPI_ON_DEPLETED``) says
    what a repair does when spares run out."""
    global _STATE
    if _STATE is not None:
        raise RuntimeError("dpmpi.init() was already called in this process; use the communicator it returned")
    if config.get(ENV_SPAWNED) and MPI.Comm.Get_parent() != MPI.COMM_NULL:
        _STATE = _join_spawned()
        return _STATE.active
    size = MPI.COMM_WORLD.Get_size()
    n_spares = _spares_from(spares, size)
    policy = _policy_from(on_depleted)
    poll = float(config.get(ENV_SPARE_POLL))
    Comm(MPI.COMM_WORLD)  # checks that the job is fault tolerant
    try:
        world = MPI.COMM_WORLD.Dup()
    except MPI.Exception as exc:
        raise from_mpi(exc, MPI.COMM_WORLD, "init") from exc
    _warm_up(world, "init")
    try:
        table = world.allgather((_my_place(), watcher.identity()))
    except MPI.Exception as exc:
        raise from_mpi(exc, world, "init") from exc
    n_active = size - n_spares
    plan = Plan(0, tuple(range(n_active)), tuple(range(n_active, size)), size)
    state = _State(world, plan, policy, poll)
    state.cpus = {wid: place for wid, (place, _i) in enumerate(table)}
    state.procs = {wid: watcher.Ident(*i) for wid, (_c, i) in enumerate(table)}
    state.watch_mode = watcher.mode_from_env(state.procs)  # the same on every process (same table)
    state.watcher = watcher.start(state, state.watch_mode)
    _STATE = state
    _guard.set_idle_spares(list(plan.spares))
    me = state.logical()
    try:
        raw = world.Split(0 if me >= 0 else MPI.UNDEFINED, me)
    except MPI.Exception as exc:
        raise from_mpi(exc, world, "init") from exc
    if me >= 0:
        _warm_up(raw, "init")
        state.active = ResilientComm(raw, state)
        if state.watcher is not None:  # collective over the active ranks when ULFM is watched
            state.watcher.rearm()
        return state.active
    if state.watcher is not None:
        state.watcher.rearm()  # a spare: nothing to watch until it is called in
    state.post_exit_agreement()
    if not wait:  # a placeholder until called in; every MPI call on it raises until Await()
        state.role = Role.SPARE
        state.active = ResilientComm(MPI.COMM_SELF, state)
        return state.active
    state.wait_as_spare()
    assert state.active is not None
    return state.active
