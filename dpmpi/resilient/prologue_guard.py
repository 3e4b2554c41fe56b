"""How the prologue meets the program's calls: a communicator method wrapped so that it is
answered from the record on a replacement replaying and recorded on a rank whose prologue runs
(``dpmpi.resilient.prologue`` says what is recorded; ``prologue_derived``, for a derived
communicator). No state of its own: each wrapper holds its owner weakly and the ``Prologue`` it
was given. Main thread only, as the prologue.
"""
from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Callable

from mpi4py import MPI

from dpmpi.resilient.prologue_calls import (RANKED, REAL, REPLAYABLE, REPLAYABLE_NAMES, TO_ROOT, TOLD, TOLD_MAX,
                                            ReplayError, between_runs, refused, result_buffer, root_of, told_apart,
                                            told_part)
from dpmpi.resilient.prologue_derived import Where
from dpmpi.resilient.prologue_p2p import P2P, Peers, point_to_point

if TYPE_CHECKING:
    from dpmpi.resilient.prologue import Prologue


def guarded(prologue: Prologue, op: str, fn: Callable[..., Any], derived: bool,
            settle: Callable[[], None], rank: Callable[[], int] = lambda: -1,
            plain_of: Callable[[str], Callable[..., Any]] | None = None,
            again: Callable[[], Callable[..., Any]] | None = None,
            where: Callable[[], Where | None] | None = None) -> Callable[..., Any]:
    """``fn`` (a communicator's method ``op``) as the prologue needs it: answered from the record
    on a replacement replaying, recorded on a rank whose prologue runs. ``derived``: a derived
    communicator's method (answered from its group's record, where ``where`` names it).
    ``settle()``: once the prologue is over, puts ``fn`` back in this wrapper's place (no cost on
    the calls of the loop). ``rank()``: this process's rank in the communicator (asked for rooted
    collectives only).
    ``plain_of(name)``: the communicator's plain method ``name`` (the ``bcast`` of a gather's or
    reduce's result while ``tells()``, or always on a derived communicator; the ``Agree`` after a
    call between two runs). ``again()``: this wrapper as the communicator has it after a repair (a
    call between two runs is made again through it). ``where()``: a derived communicator's ``Where`` (its replayable collectives are
    recorded and answered: ``prologue_derived``; without it, an intercommunicator's, they are refused)."""
    def made_then_told(args: tuple, kwargs: dict) -> tuple[Any, bytes | None]:
        """A gather or reduce made as asked, then its root's result broadcast as bytes (pickled,
        or the buffer's): (the call's result, those bytes; None where the root cannot read it or
        it is over TOLD_MAX: the root decides, so every rank agrees)."""
        assert plain_of is not None
        out = fn(*args, **kwargs)
        root = root_of(op, args, kwargs)
        mine = None
        if rank() == root:
            try:
                if op[0].islower():
                    mine = MPI.pickle.dumps(out)
                else:
                    view = result_buffer(op, args, kwargs)
                    mine = view.tobytes() if view.nbytes <= TOLD_MAX else None
            except Exception:  # (unreadable: not recorded; the root's replacement is told at its turn)
                mine = None
            mine = mine if mine is not None and len(mine) <= TOLD_MAX else None
        return out, plain_of("bcast")(mine, root)

    def made_then_shared(args: tuple, kwargs: dict) -> tuple[Any, list]:
        """A PER_RANK call or a scatter (SCATTERS) made as asked, then every rank's result, or
        part, allgathered (``told_part``: None for one that is too large), so that every record
        holds each."""
        assert plain_of is not None
        out = fn(*args, **kwargs)
        return out, plain_of("allgather")(told_part(op, args, kwargs, out))

    def maker(args: tuple, kwargs: dict, told: bool) -> Callable[[], Any]:
        if not told:
            return lambda: fn(*args, **kwargs)
        return (lambda: made_then_told(args, kwargs)) if op in TO_ROOT else (lambda: made_then_shared(args, kwargs))

    def on_derived(args: tuple, kwargs: dict) -> Any:
        """A derived communicator's call in the prologue: answered from its survivors' record on a
        replacement replaying (made for real where they make it too), recorded elsewhere; where
        a failure there is repaired (``recovery``), followed by an agreement of its members, as
        a call on the active communicator is by one of all ranks (``between_runs``). A message on
        it: logged by its sender (``prologue_p2p``), as on the active one."""
        if op in P2P and where is not None and plain_of is not None and (on := where()) is not None:
            return point_to_point(prologue, op, fn, args, kwargs, plain_of, Peers(on.place, on.members()))
        at = where() if where is not None and op in REPLAYABLE else None
        replaying = prologue.replaying is not None
        mine = rank() if op in RANKED else -1
        if replaying:
            if at is None:
                raise ReplayError(refused(f"{op}() on a derived communicator",
                                           f"only {REPLAYABLE_NAMES} on a derived intracommunicator are "
                                           "answered from its survivors' record"))
            answer = prologue.replay_derived(at, op, args, kwargs, mine)
            if answer is not REAL:
                return answer
        # a gather or reduce recorded here is followed by its root's result broadcast to its members
        # (the root's replacement is answered from any member's record), a scan, exscan or alltoall
        # by an allgather of every member's result: the same on every member, as every member that
        # makes it for real comes through here (survivors outside the runs, replacements past their record)
        told = op in TOLD and at is not None and plain_of is not None
        make = maker(args, kwargs, told)
        recover = prologue.recovery() if at is not None and again is not None else None
        if recover is not None:
            assert again is not None and at is not None
            records = prologue.derived

            def held(out: Any) -> None:
                records.pend(at, op, args, kwargs, told_apart(op, out, told)[1], prologue.runs, mine)
            try:
                out, made_again = between_runs(op, make, args, kwargs, at.agree, recover, again, at.outcome, held)
            finally:
                records.pending = None  # (recorded below, or made again; or the repair failed)
            if made_again:
                return out  # (recorded, and answered as the program expects, by that call)
        else:
            out = make()
        out, kept = told_apart(op, out, told)
        if at is None:
            if prologue.recording:
                prologue.unreplayable(op, True)
        elif prologue.recording or (replaying and not prologue.full):  # (made for real while replaying: kept too)
            prologue.record_derived(at, op, args, kwargs, kept, mine)
        return out

    def call(*args: Any, **kwargs: Any) -> Any:
        if prologue.replaying is None and (prologue.inside or prologue.closed):
            if prologue.closed:
                settle()
            return fn(*args, **kwargs)
        if derived:
            return on_derived(args, kwargs)
        if op in P2P and plain_of is not None:  # (a message: logged by its sender, prologue_p2p)
            return point_to_point(prologue, op, fn, args, kwargs, plain_of)
        if prologue.replaying is not None:
            answer = prologue.replay(op, args, kwargs, rank() if op in RANKED else -1)
            if answer is not REAL:
                return answer
        if op not in REPLAYABLE:
            out = fn(*args, **kwargs)
            if prologue.recording:
                prologue.unreplayable(op, False)
            return out
        told = op in TOLD and plain_of is not None and prologue.tells()
        prologue.seen += 1
        make = maker(args, kwargs, told)
        recover = prologue.recovery()
        if recover is not None and plain_of is not None and again is not None:
            agree = prologue.setup.agree() if recover is prologue.setup else plain_of("Agree")
            out, made_again = between_runs(op, make, args, kwargs, agree, recover, again)
            if made_again:
                return out  # (recorded, and answered as the program expects, by that call)
        else:
            out = make()
        out, kept = told_apart(op, out, told)
        if prologue.recording:
            prologue.record(op, args, kwargs, kept, rank() if op in RANKED else -1)
        return out

    call.__name__ = op
    call.__qualname__ = f"Comm.{op}"
    call.__doc__ = getattr(fn, "__doc__", None)
    return call


def cached(owner: Any, op: str, plain: Callable[..., Any], record: Prologue, derived: bool,
           peer: Callable[[Any, str], Callable[..., Any]] | None = None) -> Callable[..., Any]:
    """``guarded`` for the method ``op`` that ``owner`` (a dpmpi communicator) caches in its
    ``__dict__``: once the prologue is over the plain method takes the wrapper's place again (a
    repair empties the cache). The wrapper holds its owner weakly: a handle in a reference cycle
    would outlive the program's last reference, and a repair would take it as still in use
    (``holding.held``; seen: a communicator made and dropped in each step was rebuilt for a
    replacement, which then took it for its own next one and the job hung)."""
    me = weakref.ref(owner)

    def settle() -> None:
        holder = me()
        if holder is not None and holder.__dict__.get(op) is wrapper:
            holder.__dict__[op] = plain

    def rank() -> int:
        holder = me()
        return -1 if holder is None else int(holder.Get_rank())

    def plain_of(name: str) -> Callable[..., Any]:  # (``peer``: the owner's plain method, not the recorded one)
        holder = me()
        assert holder is not None and peer is not None
        return peer(holder, name)

    def again() -> Callable[..., Any]:
        return getattr(me(), op)

    def where() -> Where | None:  # (a derived communicator's: its place, size and members)
        holder = me()
        assert holder is not None
        return holder.recorded_where()
    wrapper = guarded(record, op, plain, derived, settle, rank, plain_of if peer is not None else None, again,
                      where if derived else None)
    return wrapper
