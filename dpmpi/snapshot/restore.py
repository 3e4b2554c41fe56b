"""The collective part of ``Snapshot.restore()``: agree on what every rank holds, decide with
``plan.plan_restore``, move the copies that ranks lack, verify checksums everywhere, write the
arrays back, and re-replicate for the new topology (or fall back to the snapshot files).

Called on the program's thread with the Snapshot quiesced (no copy, no replication running).
"""
from __future__ import annotations

import array
import errno
import json
import time
import warnings
from typing import Any, Callable, NamedTuple

from mpi4py import MPI

from dpmpi.mpicall import cause_of, keep_pending
from dpmpi.errors import from_mpi
from dpmpi.snapshot import plan, pull
from dpmpi.snapshot.buffers import Buffers, load
from dpmpi.snapshot.committer import Committer
from dpmpi.snapshot.errors import SnapshotLostError
from dpmpi.snapshot.layout import from_signature, signature
from dpmpi.snapshot.native import Codes, Slot
from dpmpi.snapshot.persistence import Persistence
from dpmpi.snapshot.replication import Replication

def waitall(reqs: list, comm: MPI.Comm, op: str) -> None:
    """Waitall whose failure is reported as the error of the request that failed (not as
    ERR_IN_STATUS), so that a peer's failure is a ProcFailedError/RevokedError. Requests left
    pending keep their slot memory for the life of the process."""
    statuses = [MPI.Status() for _ in reqs]
    try:
        MPI.Request.Waitall(reqs, statuses)
    except MPI.Exception as exc:
        keep_pending(reqs)
        raise from_mpi(cause_of(exc, statuses), comm, op) from exc


def post_copy(post: Any, peer: int, header: Any, parts: list) -> list:
    """A copy's header and its entries' bytes (``parts``, one byte buffer per entry) as
    non-blocking messages (``post``: comm.Isend or comm.Irecv), each entry in chunks of at most
    ``DPMPI_CHUNK`` (4 MiB: cext/dpmpi_snap.c says why). Both sides cut the same way: the layouts
    are checked equal first, and padding between entries is not sent."""
    tag_hdr, tag_data = Codes.tags()
    chunk = Codes.chunk()
    reqs = [post([header, MPI.BYTE], peer, tag_hdr)]
    for data in parts:
        for off in range(0, len(data), chunk):
            reqs.append(post([data[off:off + chunk], MPI.BYTE], peer, tag_data))
    return reqs


class _Info(NamedTuple):
    """What one rank told the others in a restore's agreement (``_holdings``), with its rank."""
    rank: int
    sig: list  # its layout's signature
    own: dict[int, int]  # its own slots: {epoch: checksum}
    held: dict[int, dict[int, int]]  # the replicas it holds: {owner: {epoch: checksum}}
    layouts: dict[int, list]  # the layouts it knows, by logical rank
    disk: list[int]  # the epochs on disk for it
    direct: bool  # it may receive its copy straight into its arrays
    shift: int  # where its own slots start in a page
    offer: tuple  # pull.offer: whether and where a peer on its node may read its replicas


def _holdings(buffers: Buffers, repl: Replication, persist: Persistence, swap: bool) -> tuple:
    """What this rank tells the others in a restore's agreement (its rank is added once the new
    snapshot communicator numbers it). A rank may receive its copy straight into its arrays only
    when its caller waits for the refill of its own slot before modifying them (``swap``)."""
    return (signature(buffers.entries), buffers.holdings(), repl.holdings(), repl.layouts,
            persist.epochs(repl.comm.Get_rank()), swap and buffers.can_receive_direct(), buffers.shift,
            pull.offer(repl.addresses()))


def _capped(info: tuple, cap: int | None) -> tuple:
    """A rank's ``_holdings`` without the epochs newer than ``cap`` (None: all of them)."""
    if cap is None:
        return info
    sig, own, held, layouts, disk, *rest = info
    return (sig, {e: c for e, c in own.items() if e <= cap},
            {o: {e: c for e, c in epochs.items() if e <= cap} for o, epochs in held.items()}, layouts,
            [e for e in disk if e <= cap], *rest)


def _check_layouts(infos: list[_Info]) -> None:
    """The layouts that were registered for each logical rank (a replacement must match)."""
    known: dict[int, list] = {}
    for info in infos:
        for owner, sig in info.layouts.items():
            known.setdefault(owner, sig)
    mismatch = [i.rank for i in infos if i.rank in known and json.dumps(known[i.rank]) != json.dumps(i.sig)]
    if mismatch:
        r = mismatch[0]
        raise ValueError(f"rank {r} registered different arrays than the rank it replaces had: "
                         f"{infos[r].sig} vs {known[r]}; a replacement must register the same names, "
                         f"dtypes and shapes")


def quiesce(committer: Committer, buffers: Buffers, repl: Replication, persist: Persistence) -> None:
    """Before a restore, end a background commit, the staging copy (discarded) and a replication
    that a failure interrupted. A background commit that failed (a peer died) is expected here."""
    if committer.pending is not None:
        # it may wait (in the copy's gate) for a replication that the failure stalled
        if repl.repl is not None and repl.repl.running and repl.repl.wait(0.05) == 1:
            repl.repair_begins()
        committer.join()
    repl.stop(revoke=True)
    buffers.discard_staging()
    persist.join()
    repl.renumber()


def restore(buffers: Buffers, repl: Replication, persist: Persistence, t0: float,
            timings: dict[str, float], arrays_hold: int | None = None,
            carry: int = -1, swap: bool = False, as_built: bool = False,
            copied: Callable[[], None] = lambda: None,
            at_most: int | None = None) -> tuple[int, dict[str, Any], Callable[[int], None] | None]:
    """Restore the newest epoch restorable everywhere (collective); (epoch, report, refill).
    ``arrays_hold``: the epoch the arrays hold, unchanged since it was staged (None: unknown).
    ``carry``: an int the caller shares in the restore's first collective; the report's
    ``carried`` is the largest over all ranks (dpmpi.Runtime: the step where the failure struck).
    ``swap``: the caller reads the arrays at once but modifies them only after the returned
    ``refill`` ran (else None), on its background thread: it copies the arrays back into this
    rank's own slot, seals it, calls ``copied()`` (the arrays may change from then on), then
    starts the re-replication. A rank that restores from its own slot then exchanges pages with it (``Buffers.swap_back``); a replacement receives
    its copy straight into its arrays (its own slot holds the epoch once the copy back is done,
    without waiting for a peer: when the holder dies right after the restore, nothing is lost).
    ``as_built``: this rank's arrays hold the state the program built for its rank, unchanged
    (False on a warm spare, whose arrays were built for another rank). When no epoch survives
    for every rank, every rank's ``carry`` is negative (none has run a step: dpmpi.Runtime, a
    failure while its first snapshot was taken) and every rank says ``as_built``, nothing is
    restored, every epoch held is dropped and -1 is returned (the caller stages and commits its
    first epoch again). ``at_most``: no epoch newer than the smallest ``at_most`` any rank gave
    is restored (None: no bound from this rank; the newer ones are dropped as any epoch not
    restored is)."""
    t = time.perf_counter()
    # the new snapshot communicator (Dup), whose first collective carries what each rank holds
    bound = -1 if at_most is None else at_most
    gathered = repl.begin_again("Snapshot.restore", (carry, as_built, bound, _holdings(buffers, repl, persist, swap)))
    scomm = repl.scomm
    rank, size = scomm.Get_rank(), scomm.Get_size()
    carried = max(int(c) for c, _u, _b, _info in gathered)
    built = [bool(u) for _c, u, _b, _info in gathered]  # every rank's as_built (the same decisions everywhere)
    cap = min((int(b) for _c, _u, b, _info in gathered if int(b) >= 0), default=None)
    infos = [_Info(r, *_capped(info, cap)) for r, (_c, _u, _b, info) in enumerate(gathered)]
    timings["agree"] = time.perf_counter() - t
    _check_layouts(infos)
    repl.layouts = {i.rank: i.sig for i in infos}
    repl.shifts = {i.rank: i.shift for i in infos}  # (a replacement's own slots may start elsewhere)
    held = {i.rank: {**i.held, i.rank: i.own} for i in infos}
    epoch, transfers, lost = plan.plan_restore(held, size)
    if epoch < 0 and carried < 0 and all(built):
        buffers.forget(-1)
        repl.keep_only(-1)
        if repl.replicas:
            repl.make_slots()
        return -1, {"epoch": -1, "carried": carried, "first_epoch_again": True,
                    "total_ms": round(1e3 * (time.perf_counter() - t0), 3)}, None
    if epoch < 0 and carried < 0 and any(built):  # (dpmpi.Runtime's first snapshot, with warm spares)
        foreign = tuple(r for r, b in enumerate(built) if not b)
        raise SnapshotLostError(
            f"the starting state of rank(s) {list(foreign)} is lost: the rank(s) died before their first "
            f"snapshot reached a buddy, and the processes that replace them hold arrays built for other ranks "
            f"(warm spares, dpmpi.init(wait=False)). With spares that build their arrays after they are "
            f"called in (dpmpi.init()), or dpmpi.Runtime(..., same_start=True) when every rank builds the same "
            f"starting arrays, dpmpi.Runtime takes its first snapshot again.", MPI.ERR_PROC_FAILED, foreign)
    if epoch < 0 and not lost:
        raise ValueError("restore() before any commit: no rank holds a committed snapshot. Call "
                         "snap.stage() and snap.commit(epoch) first (in a dpmpi.Runtime: a rank died in the first "
                         "snapshot of a Runtime made after another one's runs, and the earlier one could not restore "
                         "its end (closed, or its last run ended with commit_at_end=False): docs/limitations.md)")
    if epoch < 0:
        disk = [set(i.disk) for i in infos]
        on_disk = set.intersection(*disk) if disk else set()
        if on_disk:
            return (*_from_disk(buffers, repl, persist, rank, max(on_disk), lost, t0, carried), None)
        raise SnapshotLostError(
            f"snapshot lost for rank(s) {list(lost)}: each of them and every holder of its copies failed "
            f"together, or it failed before its first commit completed, so no epoch survives for every rank"
            + ("" if persist.directory is None else f" (and {persist.directory} has no epoch common to all ranks)")
            + ". Use more replicas (Snapshot(..., replicas=K)) or persist_dir for a disk fallback. If no rank has "
              "changed its arrays since it built them (the first commit failed), restore(carry=-1, as_built=True) "
              "on every rank returns -1 instead: commit the first epoch again (examples/primitives.py).",
            MPI.ERR_PROC_FAILED, lost)
    # transfers: a rank without its own copy gets it from a holder; straight into its arrays
    # where it can (no copy back), else into its own slot. On one node it reads the holder's copy
    # (``pull``: on its copy threads, checksummed as it arrives); else the holder sends it and
    # checks the copy it sends while the receiver pulls it (single-copy transports: the
    # receiver's side moves the bytes). A read that failed is sent as messages in a second round.
    direct = plan.direct_receivers(transfers, size, repl.replicas, epoch, held, {i.rank: i.direct for i in infos},
                                   repl.nodes)
    reads = pull.plan(transfers, [i.offer for i in infos], epoch, repl.nodes)
    t = time.perf_counter()
    incoming, parts = None, []
    if rank in transfers:
        incoming = buffers.receive_into(rank in direct)
        parts = buffers.array_buffers() if rank in direct else [incoming.part(e) for e in buffers.entries]
    reqs, sent = _post(scomm, rank, {r: h for r, h in transfers.items() if r not in reads}, incoming, parts, repl,
                       epoch)
    # A rank that receives nothing writes its own slot back (checking its checksum on the way; a
    # rank whose arrays still hold this epoch, unchanged since it was staged, copies nothing) and
    # checks the copies it sends while the receivers pull them; a receiver does it afterwards.
    # the own slot to refill (after a page exchange or a direct receive); bytes exchanged; the read
    refill, swapped, pulled = None, 0, None
    good, bad_sent, kept = True, [], False
    if incoming is None:
        slot = next(s for s in buffers.own if s.epoch == epoch)
        buffers.committed = buffers.own.index(slot)
        kept = arrays_hold == epoch
        if not kept and swap and buffers.can_swap():
            good, swapped = buffers.swap_back(slot, epoch)
            refill = slot if good else None
        else:
            good = True if kept else buffers.write_back(slot, epoch)
        timings["copy"] = time.perf_counter() - t
        bad_sent = _bad_copies(buffers, sent)
    elif rank in reads:  # True, or why not (then its copy comes as messages)
        pulled = _read(buffers, parts, reads[rank], repl.layouts[rank], held[transfers[rank]][rank][epoch], incoming,
                       epoch)
    missing = isinstance(pulled, str)
    waitall(reqs, scomm, "Snapshot.restore (transfer)")
    timings["transfer"] = time.perf_counter() - t
    t = time.perf_counter()
    if incoming is not None and not missing:
        good, slot, refill = _take(buffers, incoming, rank in direct, epoch)
        bad_sent = _bad_copies(buffers, sent)
        timings["copy"] = time.perf_counter() - t
    t = time.perf_counter()
    flags = verified(scomm, _flags(rank, good, bad_sent, missing))
    timings["verify"] = time.perf_counter() - t
    resend = {r: transfers[r] for r, f in enumerate(flags) if f == 2}
    if resend and 1 not in flags:  # the reads that failed: those copies go as messages
        t = time.perf_counter()
        reqs, sent = _post(scomm, rank, resend, incoming, parts, repl, epoch)
        waitall(reqs, scomm, "Snapshot.restore (transfer)")
        if missing:
            good, slot, refill = _take(buffers, incoming, rank in direct, epoch)
        flags = verified(scomm, _flags(rank, good, _bad_copies(buffers, sent), False))
        timings["resend"] = time.perf_counter() - t
    del parts
    ranks = tuple(r for r, f in enumerate(flags) if f == 1)
    if ranks:
        raise SnapshotLostError(f"snapshot of epoch {epoch} failed its checksum for rank(s) {list(ranks)}: "
                                f"the copy is corrupt (those ranks' arrays hold it; restore another "
                                f"way, e.g. from persist_dir)", MPI.ERR_OTHER, ranks)
    # keep only this epoch; make replica slots for the new topology; re-replicate (a rank that
    # refills its own slot first: the refill job starts its part once that slot is sealed)
    if rank not in direct:
        buffers.use(slot, epoch)
    repl.keep_only(epoch)
    t = time.perf_counter()
    args = None
    if repl.replicas:
        if refill is None:  # (else the refill job makes them, off the restore's path)
            repl.make_slots()
        dests, froms = plan.missing_copies(rank, size, repl.replicas, epoch, held, repl.nodes)
        args = (epoch, buffers.own[buffers.committed], dests, froms)
        if refill is None:
            repl.replicate(*args)
    timings["rereplicate_post"] = time.perf_counter() - t
    return epoch, {"epoch": epoch, "carried": carried, "received": incoming is not None, "direct": rank in direct,
                   "read": pulled,
                   "kept": kept, "swapped_mib": round(swapped / 2**20, 3),
                   "ms": {k: round(1e3 * v, 3) for k, v in timings.items()},
                   "total_ms": round(1e3 * (time.perf_counter() - t0), 3)}, \
        None if refill is None else _refill_job(buffers, repl, refill, args, copied)


def _refill_job(buffers: Buffers, repl: Replication, slot: Slot, args: tuple | None,
                copied: Callable[[], None]) -> Callable[[int], None]:
    """After a page exchange or a direct receive: copy the arrays back into ``slot``, seal it,
    tell ``copied()`` (the program may modify the arrays from then on: ``wait_refill``), then
    make the replica slots for the new topology, start the re-replication that ``restore`` left
    (its sends read that slot), and lock the other own slot of a replacement. Runs on the
    Snapshot's background committer; like a commit, it starts no replication once a repair began
    on this process. The copy starts here, not
    before ``restore`` returns: waking the copy thread, which shares the rank's core, handed it
    that core for 2-5 ms on the restore's path (the replacement's last phase, measured here and
    on a 16-core machine). The slots too: a cold spare's, new and locked, took 6-10 ms of its
    restore at 32 MiB, and ~35 ms of its first step's update when they came before ``copied``."""
    def job(epoch: int) -> None:
        try:
            buffers.start_refill(slot)
            buffers.finish_refill(slot, epoch)
        finally:
            copied()
        if args is not None:  # (first: until the re-replication ends, a buddy's death loses an epoch)
            repl.make_slots()
            repl.commit(*args)
        buffers.settle()  # (the other own slot, for the next stage; a stage settles it otherwise)
    return job


_NAP = 50e-6  # seconds between two tests of a wait that moves no bytes here


def verified(scomm: MPI.Intracomm, mine: dict[int, int]) -> list[int]:
    """The restore's last collective: every rank's flag, the largest any rank reported for it
    (``mine``: {rank: flag} seen here; 1: its copy failed its checksum, 2: reading its copy
    failed, send it). Waited for without spinning: a rank gets here as soon as its own part is
    done and then only waits for the slowest, and on a machine with fewer cores than processes a
    spinning wait took the cores the transfers and copies still running needed."""
    flags = array.array("B", bytes(scomm.Get_size()))
    for r, f in mine.items():
        flags[r] = f
    req = None
    try:
        req = scomm.Iallreduce(MPI.IN_PLACE, flags, op=MPI.MAX)
        while not req.Test():
            time.sleep(_NAP)
    except MPI.Exception as exc:
        keep_pending([req])  # (still active after a peer's failure: its buffer lives on with it)
        raise from_mpi(exc, scomm, "Snapshot.restore (verify)") from exc
    return list(flags)


def _flags(rank: int, good: bool, bad_sent: list[int], missing: bool) -> dict[int, int]:
    """This rank's part of ``verified``: 1 for the copies that failed their checksum here (its
    own unless ``good``, those it sent in ``bad_sent``), 2 for its own when reading it failed."""
    flags = {r: 1 for r in bad_sent}
    if not good:
        flags[rank] = 1
    if missing:
        flags[rank] = 2
    return flags


def _post(scomm: MPI.Intracomm, rank: int, transfers: dict[int, int], incoming: Slot | None, parts: list,
          repl: Replication, epoch: int) -> tuple[list, dict[int, tuple[Slot, tuple]]]:
    """This rank's messages of ``transfers`` (receiver -> holder): its receive into ``parts``
    (``incoming``'s header) if it is a receiver there, and the copies of ``epoch`` it sends;
    (the requests, {receiver: (the replica slot sent, its layout)})."""
    reqs: list = []
    sent: dict[int, tuple[Slot, tuple]] = {}
    if rank in transfers and incoming is not None:
        reqs += post_copy(scomm.Irecv, transfers[rank], incoming.header_buffer(), parts)
    for r, holder in transfers.items():
        if holder == rank:
            slot = next(s for s in repl.held[r] if s.epoch == epoch)
            slot.seal_header()
            entries_r = from_signature(repl.layouts[r])
            reqs += post_copy(scomm.Isend, r, slot.header_buffer(), [slot.part(e) for e in entries_r])
            sent[r] = (slot, entries_r)
    return reqs, sent


def _read(buffers: Buffers, parts: list, source: tuple[int, int], layout: list, digest: int, incoming: Slot,
          epoch: int) -> bool | str:
    """Read this rank's copy of ``epoch`` from its holder on this node (``source``: its pid and
    the copy's address; ``layout``: this rank's, as the holder lays the copy out) into ``parts``:
    True when every byte arrived and matched ``digest`` (``incoming``'s header then says so, as a
    received header would), else why not (an errno's name, or "checksum")."""
    pid, address = source
    rc, got = buffers.engine.pull(pid, parts, [address + e.offset for e in from_signature(layout)])
    if rc != 0:
        err = buffers.engine.pull_errno()
        return errno.errorcode.get(err, str(err)) if err else f"code {rc}"
    if got != digest:
        return "checksum"
    incoming.hdr[0], incoming.hdr[1], incoming.hdr[2] = epoch, incoming.nbytes, digest
    return True


def _take(buffers: Buffers, incoming: Slot, direct: bool, epoch: int) -> tuple[bool, Slot | None, Slot | None]:
    """A receiver's copy arrived (``incoming``'s header: its epoch and checksum): (whether it is
    good, the own slot now holding it, the own slot to refill). Received straight into the
    arrays (``direct``), its checksum was checked by the sender or as it was read; else it is
    checked on its way from the slot into the arrays."""
    if direct:
        return int(incoming.hdr[0]) == epoch, None, buffers.use_unfilled(epoch)
    incoming.epoch, incoming.digest = int(incoming.hdr[0]), int(incoming.hdr[2])
    buffers.committed = buffers.own.index(incoming)
    return buffers.write_back(incoming, epoch), incoming, None


def _bad_copies(buffers: Buffers, sent: dict) -> list[int]:
    """The receivers whose copy, sent from here, did not match its checksum."""
    return [r for r, (slot, entries) in sent.items() if buffers.checksum(slot, entries) != slot.digest]


def _from_disk(buffers: Buffers, repl: Replication, persist: Persistence, rank: int, epoch: int,
               lost: tuple[int, ...], t0: float, carried: int) -> tuple[int, dict[str, Any]]:
    warnings.warn(f"dpmpi: in-memory snapshots lost for rank(s) {list(lost)}; restoring epoch {epoch} "
                  f"from {persist.directory}", RuntimeWarning, stacklevel=4)
    load(buffers, lambda arrays: persist.read(rank, epoch, arrays, buffers.entries, buffers.engine), epoch)
    buffers.forget(epoch)
    repl.keep_only(-1)
    if repl.replicas:
        repl.make_slots()
    return epoch, {"epoch": epoch, "carried": carried, "from_disk": True,
                   "total_ms": round(1e3 * (time.perf_counter() - t0), 3)}
