"""The program's prologue: what it does on the active communicator before its first snapshot.

A process that replaces a failed rank runs the program from its start, while the survivors are
in their recovery: its ``comm.Bcast(w, root=0)`` of the initial weights, or ``comm.bcast(config)``,
met no partner and hung the job. So every active rank records the results of its prologue's
collectives on the communicator ``dpmpi.init`` returned (``REPLAYABLE``, either case: bcast,
allreduce, allgather and barrier, the same everywhere; scatter, whose root records its whole
input; gather and reduce, made as asked, then their root's result broadcast as bytes, up to
``TOLD_MAX``, so that every record holds it; scan, exscan and alltoall, whose result differs by
rank, made as asked, then every rank's result allgathered, so that every record holds each
rank's). The record closes at this process's first snapshot
operation (``stage``, ``commit`` or ``restore``); a repair that calls a spare in hands it over
with the derived-communicator recipes (``dpmpi.resilient.repair``), and the replacement's calls
until its first snapshot operation are answered from it in order (the same operation, root and
size, or ``ReplayError``): a scatter's part from the root's record (or its own input), a gather
or reduce with nothing off its root and with the recorded result on it, a scan, exscan or
alltoall with the failed rank's own result. A ``Gather`` or
``Reduce`` rooted at the replacement over ``TOLD_MAX``, a scatter whose root's record was not the
one handed over, and any call that needs its peers there (point-to-point, other collectives;
on a derived communicator the same calls are answered: ``prologue_derived``) raise
``ReplayError`` instead of hanging; the survivors are warned once of such calls in their
prologue. A failure in a watched call of the prologue itself is repaired there (``recovery``:
dpmpi.Runtime's, or, before one exists, dpmpi.init's for the setup's first ``DPMPI_SETUP_WATCH``
calls: ``dpmpi.resilient.setup``); else, in a program without snapshots, its replacements'
collectives are made together with the survivors.

Owner and lifetime: one ``Prologue`` per process, in ``State.prologue``; main thread only. The
record is kept for the life of the process (a survivor hands it to later replacements, and a
replacement keeps the one it was given). Its size is bounded by ``DPMPI_PROLOGUE_MAX``: beyond,
recording stops and a replacement that reaches that point raises ``ReplayError``.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable

from mpi4py import MPI

from dpmpi import config
from dpmpi.resilient.prologue_derived import DerivedRecords, Where
from dpmpi.resilient.prologue_p2p import P2PRecords
from dpmpi.resilient.prologue_calls import (  # noqa: F401 (ReplayError, Entry, the sets: this module's API too)
    NEEDS_PEERS, PER_RANK, REAL, REPLAYABLE, REPLAYABLE_NAMES, ROOTED, SAME_EVERYWHERE, TO_ROOT, TOLD_MAX, WATCHED,
    Entry, ReplayError, as_root, between_runs, creation_between_runs, entry_of, make_entry, per_rank_reply,
    refused, result_buffer, root_of, rooted_reply, write_recorded)
from dpmpi.callsite import program_level, program_line

ENV_MAX = "DPMPI_PROLOGUE_MAX"
MAX_CALLS = 1024  # a prologue is a handful of calls: past this many, recording stops (a program without snapshots)
# with dpmpi.Runtime, what lies between its runs is recorded for the job's life (every epoch's
# evaluation: a replacement redoes them all); past this many calls, recording stops there too
MAX_CALLS_BETWEEN = 65536


class Prologue:
    """This process's record of its prologue (see the module), and, with ``dpmpi.Runtime``, of
    what the program does between two ``run`` calls (told by ``run_begins``, ``run_ends``; nothing
    is recorded inside): a replacement whose survivors are in their K-th run skips its first K-1
    (it restores in the K-th) and answers what lies between them from the record."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.closed = False  # this process made its first snapshot operation (outside dpmpi.Runtime)
        self.full = False  # recording stopped at DPMPI_PROLOGUE_MAX
        self.size = 0  # bytes recorded
        self.replaying: int | None = None  # a replacement: the next entry to answer from
        self.refused: dict[str, str] = {}  # calls a replacement could not redo: name -> where first made
        self.runs = 0  # dpmpi.Runtime.run calls entered so far
        self.inside = False  # inside one of them (nothing is recorded there)
        self.target = 0  # a replacement: the run its survivors are in (its earlier ones are skipped)
        self.seen = 0  # replayable calls made while the prologue was open (the same count on every rank)
        self.handed_seen = 0  # a replacement: the survivors' ``seen`` at the handover
        self.recover: Callable[[BaseException], None] | None = None  # dpmpi.Runtime's recovery, set by it
        self.setup: Any = None  # dpmpi.init's SetupWatch (dpmpi.resilient.setup), before a Runtime or a snapshot
        self.between = False  # a replacement: its survivors failed between their runs target-1 and target
        # a replacement: its survivors failed in their prologue and repaired there (handed with
        # target 0): no snapshot exists; its first run, or first restore() (-1), takes the first
        self.unsnapshotted = False
        self.restored = False  # a replacement: it restored its state in one of its runs (``restoring``)
        self.derived = DerivedRecords()  # the calls on derived communicators (prologue_derived.py)
        self.p2p = P2PRecords()  # the messages sent outside the runs (prologue_p2p.py)
        self.behind = False  # a survivor: its last repair found a rank still in its setup (plan.from_setup)
        self.retaking = self.retake = False  # a survivor / a replacement: dpmpi.runtime._retake_start

    # -- a survivor's side --
    @property
    def recording(self) -> bool:
        return not self.closed and not self.full and self.replaying is None and not self.inside

    def tells(self) -> bool:
        """Whether this prologue's next gather or reduce (either case) is followed by a broadcast
        of its root's result (so that every rank's record holds it): the same answer on every
        rank, whatever each one's record holds (a scatter's root records more), as the calls must
        be the same on all of them."""
        return not self.closed and self.replaying is None and not self.inside and self.seen < self.max_calls()

    def max_calls(self) -> int:
        return MAX_CALLS_BETWEEN if self.runs else MAX_CALLS

    def recovery(self) -> Callable[[BaseException], None] | None:
        """What repairs a failure in a watched call now (the same answer on every rank): the
        Runtime's ``recover``; without one, in the setup (no snapshot operation yet), dpmpi.init's
        while it watches (``SetupWatch.watching``); else None: the program's error."""
        setup = not (self.recover or self.closed or self.runs) and self.setup is not None
        return self.setup if setup and self.setup.watching(self.seen) else self.recover

    def record(self, op: str, args: tuple, kwargs: dict, result: Any, rank: int = -1) -> None:
        """After a replayable call in the prologue (made by ``rank``): keep what a replacement must get."""
        entry = entry_of(op, args, kwargs, result, rank, self.runs)
        self.size += len(entry.payload or b"")
        if self.size > int(config.get(ENV_MAX)) or len(self.entries) >= self.max_calls():
            self.full = True
            return
        self.entries.append(entry)

    def unreplayable(self, op: str, derived: bool) -> None:
        """A call in the prologue that a replacement could not redo (told when the prologue closes)."""
        self.refused.setdefault(("a derived communicator's " if derived else "comm.") + op + "()", program_line())

    def replay_derived(self, at: Where, op: str, args: tuple, kwargs: dict, rank: int = -1) -> Any:
        """A replacement's call on a derived communicator (``prologue_derived``; ``rank``: its rank there), or REAL."""
        return self.derived.answer(at, op, args, kwargs, self.runs, self.full, self._interrupted(True, end=False), rank)

    def _interrupted(self, past: bool, end: bool = True) -> bool:
        """Whether a replacement's call ``past`` its survivors' record is the one their failure outside the runs
        interrupted (it restored at the end of its run target-1, as they did): made with them; ``end`` (a call on
        the active communicator, where every survivor stands at that call): the replay is over."""
        if not (past and self.between and self.runs == max(self.target - 1, 0) and not self.inside):
            return False
        if end:
            self.between = False
            self._replayed()
        return True

    def record_derived(self, at: Where, op: str, args: tuple, kwargs: dict, result: Any, rank: int = -1) -> None:
        """After a replayable collective on a derived communicator (``prologue_derived``) made by ``rank``."""
        self.size += self.derived.record(at.place, at.members, op, args, kwargs, result, self.runs, rank)
        self.full = self.size > int(config.get(ENV_MAX)) or self.derived.count >= self.max_calls()  # (as record)

    def close(self, tell: bool = False) -> bool:
        """The first snapshot operation of this process: the prologue is over (a replacement's
        replay too); inside dpmpi.Runtime, which says where its runs begin and end, nothing.
        ``tell``: warn about the calls a replacement could not redo (one rank does). Whether this
        is a replacement's first one and its survivors had none (a death in their setup): its
        ``restore()`` has nothing to restore, and they take the first snapshot next."""
        if self.runs:
            return False
        _tell(self, tell, "before its first snapshot")
        first = not self.closed and self.unsnapshotted
        self.closed, self.replaying, self.unsnapshotted = True, None, False
        return first

    def run_begins(self, tell: bool = False) -> None:
        """dpmpi.Runtime.run starts: nothing is recorded until it returns. On a replacement that
        reached the run its survivors are in, the replay is over."""
        _tell(self, tell, "before its first snapshot" if self.runs == 0 else "between two dpmpi.Runtime.run calls")
        self.runs += 1
        self.inside = True
        if self.replaying is not None:
            self._skip_to(self.runs)
            if self.runs >= self.target:
                self._replayed()

    def run_ends(self) -> None:
        """dpmpi.Runtime.run returns: what the program does next is recorded (or replayed)."""
        self.inside = False

    def finished_by_survivors(self) -> bool:
        """On a replacement: whether the run it is in is one its survivors had finished (the
        Runtime then returns at once: no restore, no step, none of its end's collectives)."""
        return self.runs < self.target

    def restores(self) -> bool:
        """On a replacement: whether it restores in the run it is in: the one its survivors are
        in, or, when they failed between their runs K and K+1, the K-th (at its end: the code
        after it then runs on the state the survivors had there)."""
        if self.unsnapshotted or self.restored:
            return False
        return not self.finished_by_survivors() or (self.between and self.runs == self.target - 1)

    def retakes(self) -> bool:
        """On a replacement, in the run its survivors are in: whether they retake its first snapshot; once."""
        at = self.inside and self.runs == self.target
        retake, self.retake = self.retake and at, self.retake and self.runs < self.target
        return retake

    def restoring(self) -> None:
        """A replacement restores once: a later run is the survivors' next run too (a second
        dpmpi.Runtime's first run then takes its epoch 0 with them, as theirs does)."""
        self.restored = True

    def handover(self) -> tuple[list[Entry], bool, int, int, bool, bool] | None:
        """What a repair hands a replacement: the record, whether it stopped at its limit, the run
        the survivors are in (0: no Runtime; between two runs or ``retaking``: the next), their
        count of replayable calls outside runs (``seen``), whether they are between two runs (or
        in the prologue, its failure repaired there: run 0) and whether ``retaking``, once the
        prologue is over or its failures are repaired there (``recovery``; else None). One still
        replaying hands what it was handed (before the fifty-second session its own place: the
        next replacement ran a run the survivors had finished, and hung)."""
        if self.replaying is not None:
            return list(self.entries), self.full, self.target, self.handed_seen, self.between, self.retake
        if not self.closed and not self.runs:
            recover = self.recovery()
            if recover is None or (recover is self.setup and not self.setup.handing()):
                return None
            # the replacement answers the calls before the interrupted one and takes the first
            # snapshot with the survivors (nothing to restore)
            return list(self.entries), self.full, 0, self.seen, True, False
        if self.runs and (not self.inside or self.retaking):  # (a failure between two runs: the replacement
            # skips them all; it restores at the end of the last one the survivors finished)
            return list(self.entries), self.full, self.runs + (not self.retaking), self.seen, True, self.retaking
        return list(self.entries), self.full, self.runs, self.seen, False, False

    def watches_creation(self) -> Callable[[BaseException], None] | None:
        """Whether a derived communicator made from the active one now is followed by an
        agreement and repaired on a failure (``prologue_calls.creation_between_runs``): outside
        dpmpi.Runtime's runs, with one made (the same answer on every rank that makes it for
        real); its recovery, or None."""
        return self.recovery() if not self.inside and not self.closed else None

    def remade_outside_runs(self) -> bool:
        """Whether a replacement runs again, in order, what this process did outside dpmpi.Runtime's
        runs (a Runtime made or run: it skips the runs its survivors finished), or its closed
        prologue (dpmpi's primitives: a replacement runs its setup again before it restores; not
        before the first snapshot, or a program without snapshots would keep every communicator)."""
        return bool(self.runs) or self.recovery() is not None or self.closed

    def remakes_survivors_setup(self) -> bool:
        """On a replacement: whether it is running again, outside its runs, what its survivors did
        outside dpmpi.Runtime's runs (they had a Runtime: in or past a run, or in their prologue
        with one made; its own Runtime may not exist yet), or, with dpmpi's primitives, their
        prologue (it is in its own, answered from their closed record)."""
        return self.replaying is not None and not self.inside

    @property
    def done(self) -> bool:
        """Closed and not replaying: calls go straight to MPI from now on."""
        return self.closed and self.replaying is None

    # -- a replacement's side --
    def adopt(self, handed: tuple | None) -> None:
        """A repair made this process an active rank: answer its prologue from ``handed``."""
        replays = not (handed is None or self.closed or (self.runs and not handed[2]))
        self.derived.adopt(replays)
        self.p2p.adopt(replays)
        if not replays:
            return
        entries, full, runs, seen, between, retake = handed
        self.entries, self.full, self.target = [Entry(*e) for e in entries], bool(full), int(runs)
        self.between, self.retake = bool(between), bool(retake)
        self.unsnapshotted = self.between and not self.target
        self.size = sum(len(e.payload or b"") for e in self.entries)
        self.replaying, self.handed_seen = 0, int(seen)
        self._skip_to(self.runs)  # (a warm spare is called in inside its first run)
        if self.inside and self.runs >= self.target:
            self._replayed()  # (and that run may be the one its survivors are in)

    def _replayed(self) -> None:
        """The replay is over: this process is where its survivors were at the handover, so it
        counts their calls (``tells`` decides the same on every rank)."""
        self.replaying, self.seen = None, self.handed_seen

    def _skip_to(self, segment: int) -> None:
        """Entries of the segments before ``segment`` that this process did not ask for: passed."""
        assert self.replaying is not None
        while self.replaying < len(self.entries) and self.entries[self.replaying].segment < segment:
            self.replaying += 1

    def replay(self, op: str, args: tuple, kwargs: dict, rank: int = -1) -> Any:
        """Answer a replacement's call (``rank``: its rank) from the record (see the module)."""
        i = self.replaying
        assert i is not None
        if op in REPLAYABLE and self._interrupted(i >= len(self.entries) or self.entries[i].segment > self.runs):
            return REAL
        if op not in REPLAYABLE:
            raise ReplayError(refused(f"comm.{op}()", f"only {REPLAYABLE_NAMES} on the communicator dpmpi.init() "
                                       "returned are answered from their record"))
        if i >= len(self.entries):
            why = (f"the survivors' record stopped at {ENV_MAX}={config.get(ENV_MAX)} bytes" if self.full else
                   f"the survivors' prologue made {len(self.entries)} such call(s) and this is call {i + 1}")
            raise ReplayError(refused(f"comm.{op}()", why))
        entry = self.entries[i]
        root = root_of(op, args, kwargs)
        if entry.segment != self.runs:
            where = "before the first run" if self.runs == 0 else f"after run {self.runs}"
            raise ReplayError(refused(f"comm.{op}()", f"the survivors made no such call {where} of dpmpi.Runtime"))
        if entry.op != op or entry.root != root:
            raise ReplayError(refused(f"comm.{op}(root={root})" if root >= 0 else f"comm.{op}()",
                                       f"call {i + 1} of the survivors' prologue was {entry.op}"
                                       + (f"(root={entry.root})" if entry.root >= 0 else "()")
                                       + ": the program's prologue must make the same collectives on every rank"))
        if op in ROOTED or op in PER_RANK:
            out = (rooted_reply(op, args, kwargs, entry, i, rank) if op in ROOTED
                   else per_rank_reply(op, args, kwargs, entry, i, rank, f"comm.{op}()"))
            self.entries[i], self.replaying = as_root(op, args, kwargs, entry, rank), i + 1
            return out
        if entry.payload is None:
            raise ReplayError(refused(f"comm.{op}()", f"call {i + 1} of the survivors' prologue: {entry.why}"))
        if op[0].islower() or op == "Barrier":
            self.replaying = i + 1
            return None if op in ("barrier", "Barrier") else MPI.pickle.loads(entry.payload)
        write_recorded(f"comm.{op}()", op, args, kwargs, entry.payload, "the survivors'")
        self.replaying = i + 1
        return None


def _tell(record: Prologue, tell: bool, when: str) -> None:
    """Warn (``tell``: one rank does) of the calls in this process's record that a replacement could not redo."""
    if tell and record.replaying is None and record.refused:
        made = ", ".join(f"{name} at {where}" for name, where in record.refused.items())
        record.refused = {}
        warnings.warn(f"dpmpi: {when} this program made {made}, which a process that replaces a failed rank "
                      f"cannot redo (the survivors are recovering by then): a failure would end the job with "
                      f"a ReplayError on the replacement. Make such calls inside the step, or use "
                      f"{REPLAYABLE_NAMES} on the communicator dpmpi.init() returned or on one derived "
                      f"from it (docs/spares.md, the prologue)", RuntimeWarning, stacklevel=program_level())


from dpmpi.resilient.prologue_guard import cached, guarded  # noqa: E402,F401 (this module's API too)
