"""Replication: dpmpi's communicator for snapshot traffic, the copies this rank holds of its
owners' snapshots, and the jobs that send this rank's copy to its buddies.

Owner: one ``Replication`` per Snapshot owns the snapshot communicator, the replica slots and
the ``Replicator`` (its C thread calls MPI while a job runs). It is the Snapshot's repair
listener (``ResilientComm.add_repair_listener``): ``repair_begins`` stops the thread's MPI
traffic before the repair's first MPI call, and under ``mpi_lock`` no new job starts after it
until ``restore()`` (``begin_again``). Who holds whose copies is decided by ``plan.buddies``
(node-aware: each rank's node is allgathered with each snapshot communicator).
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any

from mpi4py import MPI

from dpmpi import config
from dpmpi.mpicall import exchange, hold_context_id, keep_forever, retire, warm_up
from dpmpi.errors import ProcFailedError, failure_known, from_mpi
from dpmpi.snapshot import plan
from dpmpi.snapshot.layout import Entry, from_signature, signature, total
from dpmpi.snapshot.native import Codes, Slot, helper_count
from dpmpi.snapshot.replicator import Replicator, bind_mpi, job_failure


class Replication:
    """This rank's side of the buddy replication (see the module's docstring)."""

    def __init__(self, comm: Any, entries: tuple[Entry, ...], replicas: int, lock: bool, pool: int,
                 shift: int = 0) -> None:
        self.comm = comm  # the program's dpmpi communicator
        self.entries = entries  # this rank's layout
        self.shift = shift  # where this rank's own slots start in a page (Buffers.shift)
        self.replicas = replicas
        self.lock = lock
        self.scomm: MPI.Intracomm | None = None  # dpmpi's communicator for snapshot traffic
        self.revoked = False  # whether scomm was revoked (then it is retired, never freed)
        self.repl: Replicator | None = None
        self.layouts: dict[int, list] = {}  # logical rank -> its layout signature
        self.shifts: dict[int, int] = {}  # logical rank -> its own slots' shift: its replica slots start there too
        # owner's logical rank -> two replica slots: set here or by a restore's refill job (make_slots,
        # the committer thread; the program's thread joins it first: wait_refill, quiesce)
        self.held: dict[int, list[Slot]] = {}
        # a waiting spare's replica slots for the common layout: taking over allocates nothing
        self.pool = [Slot(total(entries), lock, shift) for _ in range(2 * pool)]
        self.mpi_lock = threading.Lock()  # a repair's interruption vs a background commit's replication
        self.interrupted = False  # a repair began on this process; cleared by begin_again()
        self.renumbers: list[dict[int, int]] = []  # renumberings of the repairs since the last restore
        # node-aware placement: every rank's node, this rank's buddies and owners (setup_comm)
        self.nodes: list[str] = []
        self.buddies: tuple[int, ...] = ()
        self.owners: tuple[int, ...] = ()

    # -- the communicator --
    def setup_comm(self, op: str, payload: Any = None) -> list:
        """A new communicator for snapshot traffic, duplicated from the current one (collective);
        every rank's ``payload``, gathered with the ranks' nodes (in rank order)."""
        if MPI.Query_thread() < MPI.THREAD_MULTIPLE and self.replicas:
            raise RuntimeError("dpmpi.Snapshot replicates on a background thread and needs MPI_THREAD_MULTIPLE; "
                               "do not lower mpi4py.rc.thread_level (its default, 'multiple', is right)")
        bind_mpi()
        self.free_comm()
        comm = self.comm.mpi
        try:
            scomm = comm.Dup()
        except MPI.Exception as exc:
            hold_context_id()  # (it may have completed on the others: mpicall.hold_context_id)
            raise from_mpi(exc, comm, op) from exc
        self.scomm = scomm  # (from here a repair's revoke reaches it)
        warm_up(scomm, op, watch=comm, raise_failure=True)  # (a Dup made on some ranks only hung: mpi-facts.md)
        # each rank's node: copies go to other nodes than their owner's (dpmpi.placement)
        try:
            gathered = exchange(lambda: scomm.allgather((MPI.Get_processor_name(), payload)))
        except MPI.Exception as exc:
            raise from_mpi(exc, scomm, op) from exc
        self.nodes = [node for node, _p in gathered]
        rank, size = scomm.Get_rank(), scomm.Get_size()
        self.buddies = plan.buddies(rank, size, self.replicas, self.nodes)
        self.owners = plan.owners(rank, size, self.replicas, self.nodes)
        add = getattr(self.comm, "add_repair_listener", None)
        if add is not None:  # a dpmpi resilient communicator (or one derived from it)
            add(self)
        return [p for _node, p in gathered]

    def setup(self) -> None:
        """The snapshot communicator and every rank's layout (collective)."""
        self.setup_comm("Snapshot setup")
        scomm = self.scomm
        try:
            layouts = exchange(lambda: scomm.allgather((signature(self.entries), self.shift)))
        except MPI.Exception as exc:
            raise from_mpi(exc, scomm, "Snapshot setup") from exc
        self.layouts = {r: sig for r, (sig, _shift) in enumerate(layouts)}
        self.shifts = {r: shift for r, (_sig, shift) in enumerate(layouts)}
        self.make_slots()

    def free_comm(self) -> None:
        """Free the snapshot communicator; one revoked or with a failed process is retired (mpicall)."""
        if self.scomm is not None:
            if self.revoked or failure_known(self.scomm):
                retire(self.scomm)
            else:
                with contextlib.suppress(MPI.Exception):
                    self.scomm.Free()
            self.scomm, self.revoked = None, False

    def revoke(self) -> None:
        if self.scomm is not None:
            self.revoked = True
            with contextlib.suppress(MPI.Exception):
                self.scomm.Revoke()  # completes its pending requests with ERR_REVOKED

    def make_slots(self) -> None:
        """Two replica slots for each owner (``replica_slots``); the spare's pool is used up."""
        self.held = replica_slots(self.owners, self.layouts, self.shifts, self.held, self.pool, self.lock)
        self.pool = []

    # -- jobs --
    def commit(self, epoch: int, mine: Slot, *more: Any, streamed: bool = False) -> None:
        """``replicate(epoch, mine, *more)`` from a background thread unless a repair is under way
        here; ``streamed``: ``mine``, now sealed, was being sent (``stream``): its header may go."""
        with self.mpi_lock:  # not while a repair is under way on this process
            if self.interrupted:
                raise ProcFailedError(f"snapshot replication of epoch {epoch} not started or stopped: a repair "
                                      f"is under way; call snap.restore() after it", MPI.ERR_PROC_FAILED)
            if streamed:
                mine.seal_header(self.scomm.Get_rank())
                self.repl.release()
            else:
                self.replicate(epoch, mine, *more)

    def replicate(self, epoch: int, mine: Slot, dests: set[int] | None = None,
                  froms: set[int] | None = None, feed: tuple[Any, int] | None = None) -> None:
        """Send ``mine`` to the buddies and receive the owners' copies, on the C thread (only to
        ``dests`` and from ``froms`` when given; ``feed``: see ``stream``)."""
        if self.scomm is None:
            self.setup()
        to = [d for d in self.buddies if dests is None or d in dests]
        receive = {o: self.held[o] for o in self.owners if froms is None or o in froms}
        ops, meaning = job(self.scomm.Get_rank(), epoch, mine, to, receive, streamed=feed is not None)
        self.repl = self.repl or Replicator()
        self.repl.start(self.scomm, ops, meaning, barrier=True, feed=feed)

    def stream(self, epoch: int, staged: tuple[Slot, tuple[Any, int]] | None) -> bool:
        """Start sending a slot while its copy writes it (``staged``: the slot, the copy as (engine,
        job number)): each piece goes once written, the header at ``commit(streamed=True)``. The
        previous job is waited for first. False, nothing started, where streaming is off
        (``DPMPI_REPL_STREAM``, no replicas, device arrays), that job failed or a repair is under way."""
        if staged is None or not self.replicas or not streams(config.get("DPMPI_REPL_STREAM"), helper_count()):
            return False
        if self.repl is not None and self.repl.running and self.repl.wait() < 0:
            return False
        slot, feed = staged
        with self.mpi_lock:
            if not self.interrupted:
                self.collect()
                self.replicate(epoch, slot, feed=feed)
            return not self.interrupted

    def cancel(self) -> None:
        """A streamed copy failed: its header never goes; the job is abandoned."""
        if self.repl is not None and self.repl.running:
            self.abandon(self.repl, 1.0)

    def gate(self) -> Any:
        """The running job, for a copy that must wait for it before it writes (or None)."""
        return self.repl.raw if self.repl is not None and self.repl.running else None

    def busy(self) -> bool:
        return self.repl is not None and self.repl.still_running()

    def wait(self) -> None:
        """Wait for the running job (driving MPI's progress); raise if a peer failed in it."""
        if self.repl is not None and self.repl.running:
            if self.repl.wait() < 0:
                self.raise_peer_failure("snapshot replication")
            self.collect()

    def collect(self) -> None:
        """Mark the replicas that the last job delivered completely."""
        if self.repl is not None and self.repl.ops and not self.repl.still_running():
            delivered(self.repl)

    def raise_peer_failure(self, what: str) -> None:
        raise job_failure(self.repl, what)

    def stop(self, revoke: bool, grace: float = 0.0) -> None:
        """End the running job: let it finish for ``grace`` seconds, then revoke the snapshot
        communicator (its pending requests end with ERR_REVOKED on every rank)."""
        repl = self.repl
        if repl is None:
            return
        if repl.running and repl.wait(grace) == 1:
            if revoke:
                self.revoke()
            if repl.wait(2.0) == 1 and not self.abandon(repl, 1.0):
                return
        try:
            self.collect()
        except ValueError:
            if self.repl is not None:
                self.repl.ops = []

    def abandon(self, repl: Replicator, timeout: float) -> bool:
        """Make the replication thread give up its job (it leaves at its next poll). False if it
        is stuck inside an MPI call: then it and the slots it may still write are never freed,
        and new replica slots will be made."""
        repl.abandon()
        if repl.wait(timeout) != 1:
            return True
        keep_forever((repl, list(self.held.values())))
        self.held, self.repl = {}, None
        return False

    def close(self) -> bool:
        """Stop and free the thread and the communicator (local); False if memory must be kept
        for the life of the process (a job that a failure interrupted may still complete)."""
        self.stop(revoke=True, grace=30.0)  # (the peers finish the same epoch's: waiting lets theirs complete)
        if self.repl is not None and self.repl.error != 0:  # (no repair follows a close: the peers'
            self.revoke()  # jobs waiting for this one's barrier waited out their 30 s grace here)
        clean = True
        if self.repl is not None:
            interrupted = self.repl.error != 0 or self.repl.leaked() > 0  # MPI may still use the memory
            clean = self.repl.close(1.0) and not interrupted
        self.free_comm()
        return clean

    def memory(self) -> tuple:
        """What MPI may still write: the replica slots and the thread."""
        return dict(self.held), list(self.pool), self.repl

    # -- repairs (the listener contract) --
    def repair_begins(self) -> None:
        """Stop the replication thread (it must not call MPI while the repair does: seen here,
        Open MPI segfaulted in Shrink's agreement while that thread polled its requests), and keep
        a background commit from starting another; then revoke the snapshot communicator, so
        that the peers' replications waiting for this process end too."""
        with self.mpi_lock:
            self.interrupted = True
            repl = self.repl
            if repl is not None and repl.raw is not None and repl.still_running():
                self.abandon(repl, 2.0)
        self.revoke()

    def repair_done(self, event: Any) -> None:
        """Remember the repair's renumbering (policy "shrink"), applied by ``renumber``."""
        if any(old != new for old, new in event.renumber.items()):
            self.renumbers.append(dict(event.renumber))

    def renumber(self) -> None:
        """Follow the repairs since the last setup: under policy 'shrink' ranks are renumbered."""
        for renumber in self.renumbers:
            self.held, self.layouts, self.shifts = (_moved(d, renumber) for d in (self.held, self.layouts, self.shifts))
        self.renumbers = []

    def begin_again(self, op: str, payload: Any = None) -> list:
        """A new snapshot communicator after a repair (collective); jobs may start again. Every
        rank's ``payload`` (see ``setup_comm``)."""
        gathered = self.setup_comm(op, payload)
        self.interrupted = False
        return gathered

    def holdings(self) -> dict[int, dict[int, int]]:
        """The committed replicas held here: {owner: {epoch: checksum}}."""
        return {o: {s.epoch: s.digest for s in pair if s.epoch >= 0} for o, pair in self.held.items()}

    def addresses(self) -> dict[int, dict[int, int]]:
        """Where the committed replicas held here lie in memory: {owner: {epoch: address}} (a
        restore on the same node may read them: ``pull``)."""
        return {o: {s.epoch: s.address for s in pair if s.epoch >= 0} for o, pair in self.held.items()}

    def keep_only(self, epoch: int) -> None:
        """Forget every replica but those of ``epoch`` (-1: all)."""
        for s in (s for pair in self.held.values() for s in pair if s.epoch != epoch):
            s.epoch = -1


def replica_slots(owners: tuple[int, ...], layouts: dict[int, list], shifts: dict[int, int],
                  held: dict[int, list[Slot]], pool: list[Slot], lock: bool) -> dict[int, list[Slot]]:
    """Two replica slots per owner, of its layout's size: those ``held`` when that did not change
    (they may hold its copy: a restore keeps it), else two from ``pool`` (taken from it) that fit,
    else new ones starting where the owner's own slots start in a page (only a speed matter)."""
    slots: dict[int, list[Slot]] = {}
    for owner in owners:
        nbytes, shift = total(from_signature(layouts[owner])), shifts.get(owner, 0)
        old = held.get(owner)
        if old is not None and old[0].nbytes == nbytes:
            slots[owner] = old
        elif len(pool) >= 2 and (pool[0].nbytes, pool[0].shift) == (nbytes, shift):
            slots[owner] = [pool.pop(), pool.pop()]
        else:
            slots[owner] = [Slot(nbytes, lock, shift), Slot(nbytes, lock, shift)]
    return slots


def job(rank: int, epoch: int, mine: Slot, to: list[int], receive: dict[int, list[Slot]],
        streamed: bool = False) -> tuple[list, list]:
    """A replication job's operations (peer, tag, send, buffer, length, wait) and what each
    received one is, for ``collect``: ``mine`` to the ranks ``to``; from each owner of
    ``receive``, its copy into the older slot of its pair (never the newest replica).
    ``streamed``: ``mine`` is still being copied; its data goes as it is written (wait 1), its
    header once sealed and released (wait 2)."""
    tag_hdr, tag_data = Codes.tags()
    ops: list = []
    meaning: list = []
    if to and not streamed:
        mine.seal_header(rank)
    wait_hdr, wait_data = (2, 1) if streamed else (0, 0)
    for dest in to:
        ops += [(dest, tag_hdr, 1, mine.hdr, mine.header_bytes, wait_hdr),
                (dest, tag_data, 1, mine.ptr, mine.nbytes, wait_data)]
        meaning += [None, None]
    for owner, pair in receive.items():
        newest = max(pair, key=lambda s: s.epoch)
        slot = pair[1] if newest is pair[0] else pair[0]
        slot.epoch = -1
        ops += [(owner, tag_hdr, 0, slot.hdr, slot.header_bytes, 0), (owner, tag_data, 0, slot.ptr, slot.nbytes, 0)]
        meaning += [("hdr", owner, slot, epoch), ("data", owner, slot, epoch)]
    return ops, meaning


def streams(setting: str, helpers: int) -> bool:
    """Whether a commit streams its replication (``Replication.stream``), by ``DPMPI_REPL_STREAM``
    and the number of CPUs the snapshot threads have of their own (pure): copying and sending at
    once pays only where they run beside the program, not on its core."""
    return setting == "1" or (setting == "auto" and helpers > 0)


def _moved(by_owner: dict, renumber: dict[int, int]) -> dict:
    """``by_owner`` under a repair's renumbering (policy "shrink"): the dropped ranks' entries go."""
    return {renumber[o]: v for o, v in by_owner.items() if o in renumber}


def delivered(repl: Replicator) -> None:
    """Mark the replica slots that ``repl``'s ended job received completely as holding its epoch."""
    ok: dict[int, bool] = {}
    for i, what in enumerate(repl.ops):
        if what is not None:
            key = id(what[2])
            ok[key] = ok.get(key, True) and repl.op_ok(i)
    for what in repl.ops:
        if what is not None and what[0] == "data" and ok[id(what[2])]:
            _kind, owner, slot, epoch = what
            if int(slot.hdr[0]) != epoch:
                raise ValueError(f"commit epochs differ between ranks: rank {owner} committed epoch "
                                 f"{int(slot.hdr[0])} while this rank committed {epoch}; every rank must "
                                 f"commit the same epoch")
            slot.epoch, slot.digest = epoch, int(slot.hdr[2])
    repl.ops = []
