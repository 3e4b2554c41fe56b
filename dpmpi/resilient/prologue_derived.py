"""The prologue's collectives on derived communicators: what a replacement needs to redo them.

A program that splits its ranks into groups (tensor-parallel groups, a grid's rows and columns,
a node's ranks) often sets them up with collectives on those groups before its first snapshot: a
group's leader broadcasts the group's initial weights, the group agrees on a scale. A process
that replaces a failed rank runs the program from its start, and its group's survivors, already
recovering, would not make those calls again: before, it raised ``ReplayError`` and the job went
on without it (fewer ranks, another result). Now each rank records the results of its
prologue's ``bcast``, ``allreduce``, ``allgather`` and ``barrier`` (either case) on each derived
communicator it is a member of, with that communicator's members (logical ranks). Their results
are the same on every member, so a repair hands each replacement, for every derived
communicator its rank belonged to, the record of one surviving member (the lowest: one
``allgather`` over the new active communicator, only when some rank has such a record and a
replacement takes a place), and the replacement's calls are answered from it in order. Rooted
ones too (since the forty-third session), as on the active communicator (``prologue``): a
``scatter``'s root records its whole input (a replacement's part is in the handed record when
that root is the lowest surviving member, as with root 0, or every member's record after the
allgather of their parts that follows it, each up to 1 MiB; the root's replacement takes its own
part of its own input); a ``gather`` or ``reduce`` is followed by its root's result broadcast to
the members, up to ``TOLD_MAX``, so that any member's record answers the root's replacement (a
replacement that is not the root gets ``None``, as MPI gives it). A ``scan``, ``exscan`` or
``alltoall`` (either case) is followed by an allgather of every member's result, and a
replacement gets the failed rank's own; the v-variants and reduce_scatters likewise
(``prologue_calls``: a Scatterv's root records its parts, a Gatherv's root's whole buffer is
told, an Alltoallv's or a reduce_scatter's every member's whole buffer). Keyed by
the derived communicator's place in the recipes (the same on every rank: ``derived.py``), moved
with it when a repair drops forgotten places (``remap``).

A communicator whose every member is a replacement of the same repair (one of one rank, a group
that died whole) has no record: its replacements make its calls together, for real, and record
them. Its point-to-point messages are logged by their senders (``prologue_p2p``). Not covered
(``ReplayError`` as before): other calls on a derived communicator (Alltoallw, neighbourhood and
non-blocking collectives), a scatter with a part over 1 MiB whose root's record was not the one
handed over, and an intercommunicator's calls.

Where a failure in such a call is repaired (with a ``dpmpi.Runtime`` made before it: dpmpi.init's
watch of the setup ends at the first derived communicator), each is followed by an agreement of
its members (``prologue_calls.between_runs``, with an outcome); the replacement answers the calls before
the interrupted one and makes that one with them (``Prologue.replay_derived``). The records are
capped as the prologue's (``DPMPI_PROLOGUE_MAX`` bytes, and calls: a program without snapshots
records for ever).

Owner and lifetime: one ``DerivedRecords`` per process, in ``Prologue.derived``, main thread
only; kept for the life of the process, as the prologue's record.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

from mpi4py import MPI

from dpmpi import agreements
from dpmpi.mpicall import exchange
from dpmpi.resilient.prologue_calls import (PER_RANK, REAL, ROOTED, Entry, ReplayError, as_root, entry_of,
                                            per_rank_reply, refused, root_of, rooted_reply, write_recorded)
from dpmpi.resilient.prologue_p2p import P2PRecords


class Where(NamedTuple):
    """Which derived communicator a call is made on (``where_of``)."""

    place: int  # its place in the recipes
    members: Callable[[], tuple[int, ...]]  # its members' logical ranks (group calls: asked when first recorded)
    agree: Callable[[int], int] = int  # dpmpi's Agree on it (gives up when a repair begins: agreements.py)
    outcome: Callable[[], bool] = bool  # after the repair, how an agreement given up there ended (agreements.outcome)


def where_of(raw: MPI.Comm, place: int, active: MPI.Comm, owner: Callable[[], Any]) -> Where | None:
    """The derived communicator ``raw`` at ``place`` (``owner``: a weak reference to the program's
    handle) as the record names it (None: an intercommunicator, whose collectives' results come
    from the other group: not recorded). The handle is held weakly: held strongly here, a step's
    communicator whose call a failure cut short stayed in use through the repair (what kept that
    call's frame alive was not found), which rebuilt it and handed it to the replacement for its
    next ``Split``, made anew by the others (a hang in half the runs of
    ``tests/programs/derived_per_step.py loop``; ``holding.held``)."""
    if raw.Is_inter():
        return None

    handle = MPI._handleof(raw)  # (the agreement's: a repair gives raw the rebuilt communicator's)

    def agree(flag: int) -> int:
        return int(owner().Agree(flag))

    def outcome() -> bool:
        return agreements.outcome(handle)

    def members() -> tuple[int, ...]:
        mine, whole = raw.Get_group(), active.Get_group()
        try:
            return tuple(int(m) for m in MPI.Group.Translate_ranks(mine, list(range(mine.Get_size())), whole))
        finally:
            mine.Free()
            whole.Free()
    return Where(place, members, agree, outcome)


class Offer(NamedTuple):
    """One survivor's record of one derived communicator, for the replacements of its members."""

    place: int  # the communicator's place in the recipes (before the repair's renumbering)
    members: tuple[int, ...]  # its members' logical ranks (before the repair's renumbering)
    entries: list[Entry]


def offers(records: dict[int, tuple[tuple[int, ...], list[Entry]]], mine: int, failed: set[int],
           wanted: set[int]) -> list[Offer]:
    """What the survivor with logical rank ``mine`` brings to a repair in which the ranks
    ``failed`` died and replacements take the ranks ``wanted``: its record of each derived
    communicator that a replacement is a member of, where it is that communicator's lowest
    surviving member (so each record travels once). Pure."""
    out = []
    for place, (members, entries) in sorted(records.items()):
        if wanted.intersection(members) and min((m for m in members if m not in failed), default=-1) == mine:
            out.append(Offer(place, members, list(entries)))
    return out


def taken_from(brought: list[list[Offer]], me: int) -> dict[int, tuple[tuple[int, ...], list[Entry]]]:
    """The records a replacement that takes logical rank ``me`` keeps from what the survivors
    brought (``offers``): those of the communicators it is a member of. Pure."""
    return {o.place: (tuple(o.members), [Entry(*e) for e in o.entries])
            for offered in brought for o in offered if me in o.members}


def remapped(records: dict[int, tuple[tuple[int, ...], list[Entry]]], old: list[int],
             renumber: dict[int, int]) -> dict[int, tuple[tuple[int, ...], list[Entry]]]:
    """The records after a repair kept the recipes at ``old`` (new place ``i`` was ``old[i]``)
    and renumbered the logical ranks (``renumber``, old -> new; the ranks not in it are gone).
    Pure."""
    at = {o: i for i, o in enumerate(old)}
    return {at[p]: (tuple(renumber[m] for m in members if m in renumber), entries)
            for p, (members, entries) in records.items() if p in at}


def hand_over(comm: MPI.Intracomm, records: DerivedRecords, was_active: bool, me: int, failed: list[int],
              wanted: list[int], sent: P2PRecords) -> None:
    """In a repair that calls replacements in (they take the logical ranks ``wanted``; ``failed``
    died), over its new active communicator ``comm``, on every process of it: each survivor
    (``was_active``, logical rank ``me``) brings its ``offers``, and the messages it ``sent`` to
    those ranks in the prologue (``prologue_p2p``), and each replacement (which takes rank ``me``)
    stages what concerns it. One allgather."""
    mine = (records.offers(me, set(failed), set(wanted)), sent.offers(me, set(wanted))) if was_active else ([], [])
    brought = exchange(lambda: comm.allgather(mine))
    if not was_active:
        records.stage([b[0] for b in brought], me, wanted)
        sent.stage([b[1] for b in brought], me, wanted)


class DerivedRecords:
    """This process's record of its prologue's collectives on derived communicators (see the
    module), and, on a replacement, where its replay of each one stands."""

    def __init__(self) -> None:
        self.records: dict[int, tuple[tuple[int, ...], list[Entry]]] = {}  # place -> (members, entries)
        self.next: dict[int, int] = {}  # a replacement: place -> the next entry to answer from
        self.staged: dict[int, tuple[tuple[int, ...], list[Entry]]] | None = None  # handed, not yet adopted
        self.fresh: set[int] = set()  # a replacement: the logical ranks its repair's replacements took
        self.fresh_staged: set[int] = set()
        # a replacement: the places past whose survivors' record it came at the call their failure
        # interrupted; its calls there are made with them from then on (``answer``)
        self.live: set[int] = set()
        # a survivor: its call whose agreement gave up as a repair began (``pend``): place, members, entry, outcome
        self.pending: tuple[int, tuple[int, ...], Entry, Callable[[], bool]] | None = None
        self.count = 0  # the entries held (a program without snapshots records for ever: Prologue caps it)

    def __bool__(self) -> bool:
        return bool(self.records) or self.pending is not None

    def record(self, place: int, members: Callable[[], tuple[int, ...]], op: str, args: tuple, kwargs: dict,
               result: Any, segment: int, rank: int = -1) -> int:
        """After a recorded call ``op`` on the derived communicator at ``place`` (made by ``rank``
        there, for a rooted one): keep its result (``members()``: the communicator's logical
        ranks, asked once). The bytes kept."""
        if place not in self.records:
            self.records[place] = (members(), [])
        entry = entry_of(op, args, kwargs, result, rank, segment)
        self.records[place][1].append(entry)
        self.count += 1
        return len(entry.payload or b"")

    def exhausted(self, at: Where, segment: int) -> bool:
        """Whether this replacement's next call on ``at`` in ``segment`` lies past its survivors'
        record (and not every member is a replacement of its repair: they make it together)."""
        if self.fresh and set(at.members()) <= self.fresh:
            return False
        entries, i = self._cursor(at.place, segment)
        return i >= len(entries) or entries[i].segment > segment

    def _cursor(self, place: int, segment: int) -> tuple[list[Entry], int]:
        """The record of ``place`` and where the replay of ``segment`` stands in it (the entries of
        an earlier segment not asked for, a skipped run's, passed)."""
        entries = self.records.get(place, ((), []))[1]
        i = self.next.get(place, 0)
        while i < len(entries) and entries[i].segment < segment:
            i += 1
        return entries, i

    def answer(self, at: Where, op: str, args: tuple, kwargs: dict, segment: int, full: bool,
               interrupted: bool, rank: int = -1) -> Any:
        """A replacement's call on ``at``: from the record (``replay``), or ``REAL`` where it is
        made with the survivors: past the record when ``interrupted`` (``Prologue`` says whether
        a call past it now is the one their failure interrupted), and every later call on that
        communicator. Per communicator, not the whole replay: when two members of different groups
        died, the groups' survivors stood at different calls (seen: ``tp_setup.py`` hung when the
        first group past its record ended the replay, and the replacement made its other pair's
        next ``allreduce`` for real while that pair's survivor, further on, stood at its ``Bcast``;
        1 of 40 runs with two ranks killed 0.2 s apart, forty-second session)."""
        if at.place in self.live:
            return REAL
        if interrupted and self.exhausted(at, segment):
            self.live.add(at.place)
            return REAL
        return self.replay(at, op, args, kwargs, segment, full, rank)

    def replay(self, at: Where, op: str, args: tuple, kwargs: dict, segment: int, full: bool, rank: int = -1) -> Any:
        """Answer a replacement's call ``op`` on the derived communicator ``at`` in the segment
        ``segment`` (dpmpi.Runtime runs before it) from the record it was handed (``rank``: its
        rank there, for a rooted one: ``prologue_calls.rooted_reply``); ``REAL`` where every
        member of that communicator is a replacement of the same repair (they make it
        together, as they run the same program: a communicator of one, or a group that died
        whole)."""
        name = f"{op}() on a derived communicator"
        place = at.place
        if self.fresh and set(at.members()) <= self.fresh:
            return REAL  # (what this process holds of it, it recorded making them so)
        if place not in self.records:
            raise ReplayError(refused(name, "its surviving members made no call on it"))
        entries, i = self._cursor(place, segment)
        if i >= len(entries) or entries[i].segment != segment:
            why = ("its survivors' record stopped at DPMPI_PROLOGUE_MAX" if full else
                   f"its surviving members made {sum(e.segment == segment for e in entries)} call(s) on it "
                   + ("before the first run" if segment == 0 else f"after run {segment}") + " and this is one more")
            raise ReplayError(refused(name, why))
        entry, root = entries[i], root_of(op, args, kwargs)
        if entry.op != op or entry.root != root:
            raise ReplayError(refused(name, f"its surviving members' call there was {entry.op}"
                                            + (f"(root={entry.root})" if entry.root >= 0 else "()")
                                            + ": the members must make the same collectives on it"))
        if op in ROOTED or op in PER_RANK:
            out = (rooted_reply(op, args, kwargs, entry, i, rank, f"{op}(root={root}) on a derived communicator")
                   if op in ROOTED else per_rank_reply(op, args, kwargs, entry, i, rank, name))
            entries[i] = as_root(op, args, kwargs, entry, rank)
            self.next[place] = i + 1
            return out
        if entry.payload is None:
            raise ReplayError(refused(name, f"its surviving members' call: {entry.why}"))
        self.next[place] = i + 1
        if op in ("barrier", "Barrier"):
            return None
        if op[0].islower():
            return MPI.pickle.loads(entry.payload)
        write_recorded(name, op, args, kwargs, entry.payload, "the survivors'")
        return None

    def pend(self, at: Where, op: str, args: tuple, kwargs: dict, result: Any, segment: int, rank: int = -1) -> None:
        """This process's call ``op`` on ``at`` completed, and the agreement after it gave up as
        a repair began (``prologue_calls.between_runs``): until the call's code records it or
        makes it again after the repair, it is offered with the record if that agreement ended
        well (``offers``). Before, it was recorded only after the repair: the replacement, handed
        the record without it, made that call for real while this member, the agreement having
        succeeded, went on (a hang, forty-second session)."""
        self.pending = (at.place, at.members(), entry_of(op, args, kwargs, result, rank, segment), at.outcome)

    # -- a repair's side --
    def offers(self, mine: int, failed: set[int], wanted: set[int]) -> list[Offer]:
        records = self.records
        if self.pending is not None and self.pending[3]():  # (after agreements.join_derived closed it)
            place, members, entry, _outcome = self.pending
            records = {**records, place: (members, [*records.get(place, (members, []))[1], entry])}
        return offers(records, mine, failed, wanted)

    def stage(self, brought: list[list[Offer]], me: int, wanted: list[int]) -> None:
        """A replacement that takes logical rank ``me`` (its repair's replacements take ``wanted``):
        what the survivors brought, until the repair's rebuild moves it (``remap``) and the
        prologue adopts it (``adopt``)."""
        self.staged, self.fresh_staged = taken_from(brought, me), set(wanted)

    def remap(self, old: list[int], renumber: dict[int, int]) -> None:
        """The repair kept the recipes at ``old`` and renumbered the logical ranks."""
        self.records = remapped(self.records, old, renumber)
        self.live = {old.index(p) for p in self.live if p in old}
        if self.staged is not None:
            self.staged = remapped(self.staged, old, renumber)
            self.fresh_staged = {renumber[m] for m in self.fresh_staged if m in renumber}

    def adopt(self, replays: bool) -> None:
        """The prologue took the handed record (``replays``) or not: the staged records become
        this process's (its replay starts at each one's first entry) or are dropped."""
        if replays and self.staged is not None:
            self.records, self.next, self.fresh, self.live = self.staged, {}, self.fresh_staged, set()
            self.count = sum(len(entries) for _members, entries in self.records.values())
        self.staged, self.fresh_staged = None, set()
