"""A peer's death in the program's setup, before a ``dpmpi.Runtime`` or a snapshot exists, is
repaired where it happened.

A program's setup often comes before its Runtime, as the arrays' shapes come from it: rank 0's
config broadcast, a shard loaded with an ``Allreduce`` of its statistics, the feature count
agreed. A death there raised ``ProcFailedError`` in the program and ended the job (4 of 6 kills
from outside in ``bench/strangers/setup_first.py``). Now each of the program's first
``DPMPI_SETUP_WATCH`` replayable calls on the communicator ``dpmpi.init`` returned is followed by
an agreement (``prologue.recovery``, as with a Runtime made first), and a failure is repaired by
``Respawn``: nothing is restored (no snapshot exists); every rank makes the call again, the
replacement (a spare that waited in ``dpmpi.init``) once it has answered the calls before it from
the survivors' record, and it takes the first snapshot with them (a Runtime's first run, or its
``restore(as_built=True)`` returns -1 and it commits the first epoch with them, as
examples/primitives.py does).

Only while a replacement could redo the program's calls, and the program leaves failures to
dpmpi: the agreement's flag carries a second bit, cleared by a rank that made a call a
replacement cannot redo (a non-blocking collective: ``refused``), or a point-to-point one
(``p2p.made``: a message there may not have been received when the death comes), or that
registered a repair callback or listener (the program repairs by itself), and by the
creation of a derived communicator (a rank blocked on one would not reach the agreement where the
others wait: ``tests/programs/derived_block.py`` hung; and a program that repairs by itself
would see its failures there repaired by the watch: ``tests/programs/derived_per_step.py`` hung
in its own loop when the forty-fifth session tried the watch through derived communicators).
Where any rank cleared it, the watch ends
on every rank once that call succeeded (the agreement is uniform), and so it does past
``DPMPI_SETUP_WATCH`` calls (0: never on): then a death there is the program's
``ProcFailedError``, as before, and so it is when the program repairs by itself (its own
``Respawn`` after a failure in a call not watched: ``handing``; where the same failure met other
ranks in watched calls, the watch's agreement gives up when that repair begins, a word of the
repair's AND tells every rank, and the watch's ranks raise the failure to the program after the
repair, whose own ``Respawn`` then returns at once: ``overruled``). So it is when a rank made a
call a replacement cannot redo since the last agreement and a death strikes the next watched
call, before the agreement could end the watch (``handing``).

Owner and lifetime: ``watch`` runs once per process in ``dpmpi.init`` (main thread; on a
replacement, ``adopted`` runs first, in the repair) and puts one ``SetupWatch`` in
``state.prologue.setup``; it is used on the main thread only, inside the
program's calls, until its watch ends."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from dpmpi import config, ctxcomms
from dpmpi.eventlog import log_event

if TYPE_CHECKING:
    from dpmpi.resilient.state import State

ENV = "DPMPI_SETUP_WATCH"
DONE, CLEAN = 1, 2  # the agreement's bits: the call succeeded here; a replacement could redo this rank's calls


class SetupWatch:
    """The repair of a death in this process's setup (see the module)."""

    def __init__(self, state: State, calls: int) -> None:
        self.state = state
        self.calls = calls
        self.on = calls > 0
        self.repairing = False  # inside this watch's Respawn
        self.by_program = False  # a repair the program made while the watch was on (``handing``)
        self.overruled = False  # this watch's repair was also the program's on another rank: raise after it

    def watching(self, seen: int) -> bool:
        """Whether the ``seen``-th replayable call is watched (the same answer on every rank)."""
        return self.on and seen <= self.calls

    def clean(self) -> bool:
        """Whether a replacement could redo this rank's calls so far and the program leaves repairs to dpmpi."""
        state = self.state  # (dpmpi's own failure watcher is a listener too: not the program's)
        mine = [listener for listener in state.listeners.snapshot() if listener is not state.watcher]
        return not (self._unredoable() or state.callbacks or mine)

    def _unredoable(self) -> bool:
        """Whether this rank made a call a replacement cannot redo, or a point-to-point one."""
        return bool(self.state.prologue.refused) or self.state.prologue.p2p.made

    def agree(self, creation: bool = False) -> Callable[[int], int]:
        """The agreement after a watched call (dpmpi's ``Agree`` on the active communicator, which
        gives up when a repair begins: a rank whose program repairs by itself must not leave the
        others in it), with this rank's ``CLEAN`` bit ANDed in: where any rank's is clear, the
        watch ends everywhere once this call succeeded (a failed one is repaired, and its
        replacement answered, as the watch said before it). ``creation``: a derived
        communicator's (its ranks may then block on it where others wait in this watch's
        agreements: the watch ends with it)."""
        def agree(flag: int) -> int:
            comm = self.state.active
            assert comm is not None
            if not flag:  # (failed here: a rank blocked in a call not watched, e.g. a send to the dead one, wakes;
                ctxcomms.revoke(comm.mpi)  # the job hung: tests/programs/setup_p2p_repair.py, 3 of 3)
            got = int(comm.Agree((DONE if flag else 0) | (CLEAN if self.clean() and not creation else 0)))
            if got & DONE and not got & CLEAN:
                self.on = False
            return got & DONE
        return agree

    def handing(self) -> bool:
        """In a repair, while the watch is on: whether this watch made it (the replacement then
        answers its calls from the record); else the program repairs by itself (its
        ``Respawn`` after a failure in a call not watched), and the watch ends and the
        replacement's calls are made with the survivors, as before. Where the failure met some
        ranks in watched calls and others in the program's own, the repair's AND tells every
        rank (``by_program``, ``overruled``). So it does where this rank made a call a replacement
        could not redo since the last agreement (``refused``: the death came before the agreement
        could end the watch): before, each replacement raised ``ReplayError`` at that call, every
        spare was used up and the job shrank; now the failure is the program's."""
        self.by_program = self.on and (not self.repairing or self._unredoable())
        self.on = self.on and self.repairing
        return self.on

    def __call__(self, caught: BaseException) -> None:
        """Repair (``Respawn``) after ``caught``, a failure of the watched call."""
        log_event({"event": "setup-failure", "process_id": self.state.process_id, "error": type(caught).__name__,
                   "call": self.state.prologue.seen})
        comm = self.state.active
        assert comm is not None
        self.repairing = True
        try:
            comm.Respawn()  # (a failure during the repair is repaired there; one after it fails the call made again)
        finally:
            self.repairing = False
        if self.overruled:  # (some rank's program repaired by itself: every rank goes on in the program's way)
            self.overruled, self.on = False, False
            self.state.repaired_for_program = True  # (the program's Respawn for it returns at once)
            raise caught


def by_program(state: State) -> bool:
    """In a repair: whether this active rank's program repairs by itself while the watch was on
    (``SetupWatch.handing`` said so; read once)."""
    watch = state.prologue.setup
    if watch is None or not watch.by_program:
        return False
    watch.by_program = False
    return True


def overruled(state: State) -> None:
    """The repair's AND says some active rank's program repairs by itself while others repair in
    the watch (a failure met some in watched calls, some in others): the repair hands no record
    (its replacement's calls are made with the survivors'), and this process's watch, if it made
    the repair, raises the failure to the program after it (``SetupWatch.__call__``), whose own
    ``Respawn`` then returns at once. Before, the two kinds of rank went on differently and the
    job hung (a point-to-point send to the dying rank in the setup of a program that repairs by
    itself)."""
    watch = state.prologue.setup
    if watch is not None:
        watch.overruled, watch.on = watch.repairing, False


def watch(state: State) -> None:
    """Repair a death in this process's setup where it happens (see the module); once."""
    if state.prologue.setup is None:
        state.prologue.setup = SetupWatch(state, int(config.get(ENV)))


def adopted(state: State, handed: Any) -> None:
    """A replacement takes its survivors' prologue record (``Prologue.adopt``). Its own watch is
    on only where theirs repaired their setup there (handed with run 0, between): it then answers
    their calls and makes the next ones with them, agreements included; else its calls are made
    with theirs, which no agreement follows (before, its first calls waited in one: a hang)."""
    state.prologue.adopt(handed)
    watch(state)
    state.prologue.setup.on = state.prologue.setup.on and handed is not None and not handed[2] and bool(handed[4])
