"""The collectives a replacement's prologue can redo, read from mpi4py's call signatures: which
they are, their root, the bytes they write, what a survivor records of each call (``Entry``) and
how a scatter or gather is answered from it, and how a call between two dpmpi.Runtime runs is
made (dpmpi.resilient.prologue uses these). No state; no MPI call but through the functions
they are given (and mpi4py's pickle)."""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

from mpi4py import MPI

from dpmpi.errors import ProcFailedError, RevokedError
from dpmpi.resilient import msgspec

# collectives whose result is the same on every rank: a survivor's record is the replacement's result
# (Allgatherv: its whole receive buffer, as given with its counts and displacements)
SAME_EVERYWHERE = frozenset({"bcast", "allreduce", "allgather", "barrier",
                             "Bcast", "Allreduce", "Allgather", "Allgatherv", "Barrier"})
# rooted ones a replacement can redo: a scatter's part is in its root's record (Scatterv: its
# counts given as a list), a gather or a reduce needs nothing on a rank that is not its root
ROOTED = frozenset({"scatter", "Scatter", "Scatterv", "gather", "Gather", "Gatherv", "reduce", "Reduce"})
# what a rank that is not the root gets: nothing (its root holds the result). In an open prologue
# they are made as asked, then their root's result is broadcast (pickled, or the buffer's bytes;
# Gatherv: its whole receive buffer) so that every record holds it for the root's replacement, up
# to TOLD_MAX bytes (the root decides)
TO_ROOT = frozenset({"gather", "Gather", "Gatherv", "reduce", "Reduce"})
TOLD_MAX = 16 << 20
# collectives whose result differs by rank (a prefix sum for the rank's offset, a personalized
# exchange): in an open prologue they are made as asked, then every rank's result is allgathered
# (pickled, or the buffer's bytes; each up to PER_RANK_MAX: each rank decides for its own, so that
# an Alltoall of large blocks costs one small allgather, not n copies of them), so that every
# record holds the replacement's result (``per_rank_reply``; Alltoallv and the reduce_scatters: each
# rank's whole receive buffer)
PER_RANK = frozenset({"scan", "exscan", "alltoall", "Scan", "Exscan", "Alltoall", "Alltoallv", "Reduce_scatter",
                      "Reduce_scatter_block"})
PER_RANK_MAX = 1 << 20
# their answer depends on the replacement's rank in the communicator
RANKED = ROOTED | PER_RANK
REPLAYABLE = SAME_EVERYWHERE | ROOTED | PER_RANK
# a scatter is followed by an allgather of every rank's part too (each up to PER_RANK_MAX), so that
# any record answers a replacement, whoever died with it (the root's record alone holds the parts
# of a larger one: its root must then be the lowest surviving rank)
SCATTERS = frozenset({"scatter", "Scatter", "Scatterv"})
TOLD = TO_ROOT | PER_RANK | SCATTERS  # the calls followed by a broadcast or an allgather of their results
# what a replacement is told when it makes another call (prologue.py, prologue_guard.py)
REPLAYABLE_NAMES = ("bcast, allreduce, allgather, barrier, scatter, gather, reduce, scan, exscan and alltoall (either "
                    "case), Allgatherv, Gatherv, Scatterv, Alltoallv, Reduce_scatter and Reduce_scatter_block")
# collectives whose result is their whole receive buffer (as given with counts and displacements)
WHOLE = frozenset({"Allgatherv", "Gatherv", "Alltoallv", "Reduce_scatter", "Reduce_scatter_block"})
# every other method of a communicator that needs its peers to return (or to be matched)
NEEDS_PEERS = frozenset({
    "Alltoallw", "Bsend", "Iallgather",
    "Iallgatherv", "Iallreduce", "Ialltoall", "Ialltoallv", "Ialltoallw", "Ibarrier", "Ibcast", "Ibsend",
    "Iexscan", "Igather", "Igatherv", "Improbe", "Irecv", "Ireduce", "Ireduce_scatter", "Ireduce_scatter_block",
    "Irsend", "Iscan", "Iscatter", "Iscatterv", "Isend", "Isendrecv", "Isendrecv_replace", "Issend", "Mprobe",
    "Probe", "Recv", "Rsend", "Send",
    "Sendrecv", "Sendrecv_replace", "Ssend", "Agree", "Iagree", "Neighbor_allgather",
    "Neighbor_allgatherv", "Neighbor_alltoall", "Neighbor_alltoallv", "Neighbor_alltoallw",
    "Ineighbor_allgather", "Ineighbor_allgatherv", "Ineighbor_alltoall", "Ineighbor_alltoallv",
    "Ineighbor_alltoallw", "bsend", "ibsend", "improbe", "irecv", "isend",
    "issend", "mprobe", "probe", "recv", "send", "sendrecv", "ssend",
    "neighbor_allgather", "neighbor_alltoall",
})
WATCHED = REPLAYABLE | NEEDS_PEERS
IN_PLACE_KEPT = frozenset({"Allreduce", "Scan", "Exscan", "Alltoall", "Allgatherv", "Gatherv", "Alltoallv",
                           "Reduce_scatter", "Reduce_scatter_block"})  # (between_runs)
REAL = object()  # Prologue.replay's answer: make the call for real (the replacement caught up)


class Parts(list):
    """Every rank's part of a scatter, as allgathered after it (pickled, or the buffer's bytes)."""


def told_apart(op: str, made: Any, told: bool) -> tuple[Any, Any]:
    """(the call's result, what its record keeps) of a call made as told (``told``: with the
    broadcast or allgather of ``TOLD``, which ``made`` then pairs with the result)."""
    if not told:
        return made, (None if op in TO_ROOT or op in PER_RANK else made)
    out, kept = made
    return out, (Parts(kept) if op in SCATTERS else kept)


class ReplayError(RuntimeError):
    """A replacement's prologue made a call that the record of the survivors' prologue cannot
    answer (and the survivors, already recovering, will not make)."""


class Entry(NamedTuple):
    op: str
    root: int  # bcast, scatter, gather (either case): the root; else -1
    nbytes: int  # upper case: the bytes of the result buffer (Scatter: of one rank's part); lower case: -1
    payload: bytes | None  # the result (pickled, or the buffer's bytes; scatter: the root's whole input, on
    # the root; gather: empty; a PER_RANK call: the pickled list of every rank's result); None: could not be
    # recorded (or a scatter recorded on a rank not its root)
    why: str  # why it could not be recorded ("" when it was)
    segment: int = 0  # dpmpi.Runtime.run calls made before it (0: the prologue; k: after the k-th run)


def refused(what: str, why: str) -> str:
    return (f"{what} in the prologue of a process that replaces a failed rank (before its first snapshot "
            f"operation): {why}. The survivors are recovering and will not make it, so the job would hang. "
            f"See docs/spares.md (the prologue)")


def root_of(op: str, args: tuple, kwargs: dict) -> int:
    """The root of a rooted collective (mpi4py's signatures: bcast(obj, root), Bcast(buf, root),
    scatter/gather(obj, root), reduce(obj, op, root), Scatter/Gather(sendbuf, recvbuf, root),
    Reduce(sendbuf, recvbuf, op, root)); -1 for the others."""
    if op not in ("bcast", "Bcast") and op not in ROOTED:
        return -1
    at = {"Scatter": 2, "Scatterv": 2, "Gather": 2, "Gatherv": 2, "reduce": 2, "Reduce": 3}.get(op, 1)
    root = args[at] if len(args) > at else kwargs.get("root", 0)
    return int(root)


def result_buffer(op: str, args: tuple, kwargs: dict, send: bool = False) -> memoryview:
    """The bytes an upper-case collective writes (a message as mpi4py reads it: ``msgspec``;
    the whole buffer of a WHOLE one), or, with ``send``, those it sends (Scatter's root: its whole
    input, a plain buffer or ``[buffer, datatype]``)."""
    if op == "Bcast":
        spec = args[0] if args else kwargs["buf"]
    elif send:
        spec = args[0] if args else kwargs["sendbuf"]
    else:  # Allreduce, Allgather(v), Scatter(v), Gather(v), Scan, Exscan, Alltoall(v), ...: (sendbuf, recvbuf, ...)
        spec = args[1] if len(args) > 1 else kwargs["recvbuf"]
    if spec is None or spec is MPI.IN_PLACE:
        raise ValueError("MPI.IN_PLACE or no buffer")
    if not send:
        return msgspec.whole(spec) if op in WHOLE else msgspec.region(spec)
    if isinstance(spec, (list, tuple)):
        if len(spec) != 2 or not isinstance(spec[1], MPI.Datatype):
            raise ValueError("a buffer given with a count or displacements")
        spec = spec[0]
    view = memoryview(spec)
    if not view.contiguous:
        raise ValueError("a non-contiguous buffer")
    return view.cast("B")


def write_recorded(name: str, op: str, args: tuple, kwargs: dict, data: bytes, whose: str) -> None:
    """Write ``data`` (a recorded result: ``whose``, for the error) into the buffer the call
    ``op`` writes, or raise ``ReplayError`` saying why it cannot be."""
    try:
        out = result_buffer(op, args, kwargs)
    except (TypeError, ValueError, KeyError, IndexError) as exc:
        raise ReplayError(refused(name, f"its buffer cannot be written from the record ({exc})")) from exc
    if out.readonly or out.nbytes != len(data):
        raise ReplayError(refused(name, "its buffer is read-only" if out.readonly else
                                  f"its buffer holds {out.nbytes} bytes, {whose} {len(data)}"))
    out[:] = data


def make_entry(op: str, root: int, args: tuple, kwargs: dict, result: Any, rank: int) -> Entry:
    """What a survivor (``rank``) records of a replayable call that returned ``result``."""
    if op in PER_RANK:  # ``result``: every rank's result as allgathered (a list), or None: not told
        if isinstance(result, list):
            return Entry(op, root, -1, MPI.pickle.dumps(result), "")
        return Entry(op, root, -1, None, "its results were not told to every rank")
    if op in TO_ROOT:  # ``result``: its root's result as broadcast (bytes), or None: not recorded
        return Entry(op, root, len(result), result, "") if isinstance(result, bytes) else Entry(op, root, -1, b"", "")
    if op in ("barrier", "Barrier"):
        return Entry(op, root, -1, b"", "")
    if op in SCATTERS and isinstance(result, Parts) and all(part is not None for part in result):
        return Entry(op, root, -2, MPI.pickle.dumps(list(result)), "")  # (nbytes -2: every rank's part)
    if op in SCATTERS and rank != root:
        return Entry(op, root, -1, None, f"its parts are in its root's record (rank {root}), which was not "
                                         f"the one handed over (the root failed too, or it is not the lowest "
                                         f"surviving rank)")
    if op == "scatter":
        return Entry(op, root, -1, MPI.pickle.dumps(list(args[0] if args else kwargs["sendobj"])), "")
    if op == "Scatterv":  # (its parts, one per rank: they need its counts and displacements)
        blocks = msgspec.parts(args[0] if args else kwargs["sendbuf"])
        return Entry(op, root, -1, MPI.pickle.dumps([bytes(b) for b in blocks]), "")
    if op == "Scatter":
        return Entry(op, root, result_buffer(op, args, kwargs).nbytes,
                     result_buffer(op, args, kwargs, send=True).tobytes(), "")
    if op[0].islower():
        return Entry(op, root, -1, MPI.pickle.dumps(result), "")
    out = result_buffer(op, args, kwargs)
    return Entry(op, root, out.nbytes, out.tobytes(), "")


def entry_of(op: str, args: tuple, kwargs: dict, result: Any, rank: int, segment: int) -> Entry:
    """``make_entry`` for a call that returned ``result`` in ``segment``; where its result cannot
    be recorded, an entry that says why (never fail the program's call: a replacement is told at
    its turn)."""
    try:
        root = root_of(op, args, kwargs)
    except (TypeError, ValueError, IndexError):
        root = -1  # (the call itself would have refused it)
    try:
        return make_entry(op, root, args, kwargs, result, rank)._replace(segment=segment)
    except Exception as exc:
        return Entry(op, root, -1, None, f"its result could not be recorded ({exc})", segment)


def rooted_reply(op: str, args: tuple, kwargs: dict, entry: Entry, i: int, rank: int, name: str = "") -> Any:
    """A replacement's scatter, gather or reduce (either case), from ``entry`` (call ``i + 1`` of
    the record; ``rank``: the replacement's rank in the communicator; ``name``: the call, for errors)."""
    name = name or f"comm.{op}(root={entry.root})"
    if op in TO_ROOT:
        if rank != entry.root:
            return None  # (its root holds the result already)
        if op[0].islower() and entry.payload:  # (its root's result was broadcast: every record holds it)
            return MPI.pickle.loads(entry.payload)
        if entry.payload:
            write_recorded(name, op, args, kwargs, entry.payload, "the root's result")
            return None
        raise ReplayError(refused(name, f"this process replaces the root, and the parts of the others went to "
                                        f"the failed one (a result over {TOLD_MAX} bytes is not recorded)"))
    if entry.nbytes == -2:  # (every rank's part, told)
        return _told_part_reply(op, args, kwargs, entry, rank, name)
    try:
        if op == "Scatterv":
            return _scatterv_reply(args, kwargs, entry, i, rank, name)
        if op == "scatter":
            if rank == entry.root:  # the root's replacement: its own part of its own input
                return list(args[0] if args else kwargs["sendobj"])[rank]
            if entry.payload is None:
                raise ReplayError(refused(name, f"call {i + 1} of the survivors' prologue: {entry.why}"))
            return MPI.pickle.loads(entry.payload)[rank]
        out = result_buffer(op, args, kwargs)
        whole = result_buffer(op, args, kwargs, send=True) if rank == entry.root else entry.payload
    except (TypeError, ValueError, KeyError, IndexError) as exc:
        raise ReplayError(refused(name, f"its arguments do not fit the record ({exc})")) from exc
    if whole is None:
        raise ReplayError(refused(name, f"call {i + 1} of the survivors' prologue: {entry.why}"))
    if out.readonly or (rank != entry.root and out.nbytes != entry.nbytes):
        raise ReplayError(refused(name, "its buffer is read-only" if out.readonly else
                                   f"its buffer holds {out.nbytes} bytes, the survivors' {entry.nbytes}"))
    part = memoryview(whole)[rank * out.nbytes:(rank + 1) * out.nbytes]
    if part.nbytes != out.nbytes:
        raise ReplayError(refused(name, f"the root's input holds no part for rank {rank}"))
    out[:] = part
    return None


def _told_part_reply(op: str, args: tuple, kwargs: dict, entry: Entry, rank: int, name: str) -> Any:
    """A replacement's scatter answered from every rank's part, as told after it."""
    parts = MPI.pickle.loads(entry.payload or b"")
    if not 0 <= rank < len(parts):
        raise ReplayError(refused(name, f"rank {rank} is not among the {len(parts)} parts recorded"))
    if op[0].islower():
        return MPI.pickle.loads(parts[rank])
    if rank != entry.root or (args[1] if len(args) > 1 else kwargs.get("recvbuf")) is not MPI.IN_PLACE:
        write_recorded(name, op, args, kwargs, parts[rank], "its part")
    return None


def _scatterv_reply(args: tuple, kwargs: dict, entry: Entry, i: int, rank: int, name: str) -> None:
    """A replacement's Scatterv: its part of its own input (it replaces the root), or of the
    root's, as the root recorded it (``make_entry``)."""
    recv = args[1] if len(args) > 1 else kwargs["recvbuf"]
    if rank == entry.root:
        if recv is MPI.IN_PLACE:
            return None  # (the root's part stays in its input)
        blocks = [bytes(b) for b in msgspec.parts(args[0] if args else kwargs["sendbuf"])]
    elif entry.payload is None:
        raise ReplayError(refused(name, f"call {i + 1} of the survivors' prologue: {entry.why}"))
    else:
        blocks = MPI.pickle.loads(entry.payload)
    if not 0 <= rank < len(blocks):
        raise ReplayError(refused(name, f"the root's input holds no part for rank {rank}"))
    write_recorded(name, "Scatterv", args, kwargs, blocks[rank], "its part")
    return None


def told_part(op: str, args: tuple, kwargs: dict, result: Any) -> bytes | None:
    """This rank's result of a PER_RANK call, or its part of a scatter, as every rank's record
    keeps it (pickled, or the buffer's bytes), or None where it cannot be read or is over
    PER_RANK_MAX."""
    try:
        mine = MPI.pickle.dumps(result) if op[0].islower() else result_buffer(op, args, kwargs).tobytes()
    except Exception:  # (unreadable: not recorded; that rank's replacement is told at its turn)
        return None
    return mine if len(mine) <= PER_RANK_MAX else None


def per_rank_reply(op: str, args: tuple, kwargs: dict, entry: Entry, i: int, rank: int, name: str) -> Any:
    """A replacement's scan, exscan or alltoall (either case) from ``entry`` (call ``i + 1`` of the
    record): its own rank's result as the dead rank had it (an ``Exscan``'s buffer on rank 0 is
    left as it is: MPI defines no result there)."""
    if entry.payload is None:
        raise ReplayError(refused(name, f"call {i + 1} of the survivors' prologue: {entry.why}"))
    parts = MPI.pickle.loads(entry.payload)
    part = parts[rank] if 0 <= rank < len(parts) else None
    if part is None:
        raise ReplayError(refused(name, f"the failed rank's result was not recorded (over {PER_RANK_MAX} bytes, or "
                                        f"unreadable), or rank {rank} is not among the {len(parts)} recorded"))
    if op[0].islower():
        return MPI.pickle.loads(part)
    if op != "Exscan" or rank != 0:
        write_recorded(name, op, args, kwargs, part, "the failed rank's")
    return None


def as_root(op: str, args: tuple, kwargs: dict, entry: Entry, rank: int) -> Entry:
    """What a replacement keeps of a rooted call it answered from ``entry``: for a scatter whose
    root it replaces, the root's record (its own input), so that, as the lowest surviving rank
    of a later repair, it hands over the parts (before, it kept the record it was handed, where a
    scatter's parts were not: the next replacement of another rank raised ``ReplayError``)."""
    if op in SCATTERS and rank == entry.root and entry.payload is None:
        return entry_of(op, args, kwargs, None, rank, entry.segment)
    return entry


def between_runs(op: str, make: Callable[[], Any], args: tuple, kwargs: dict, agree: Callable[[int], int],
                 recover: Callable[[BaseException], None], again: Callable[[], Callable[..., Any]],
                 outcome: Callable[[], bool] | None = None,
                 held: Callable[[Any], None] | None = None) -> tuple[Any, bool]:
    """A replayable call between two dpmpi.Runtime runs (``make()``), which every rank leaves
    together: the call, then an agreement on its success (ULFM's is uniform: a rank whose call
    completed while a peer's failed learns of it there, instead of going on to the next call). A
    failure is repaired and restored by the Runtime (``recover``), then the call is made
    again on the repaired communicator by every rank (``again()``: the method the communicator
    has now; an in-place Allreduce with its input as it was). (result, whether made again).

    ``outcome``: a derived communicator's call (dpmpi.resilient.prologue_derived), whose
    agreement, its members' only, is dpmpi's, which gives up when a repair begins (a member gone
    to repair another group's failure would never enter one that waited). A member that gave up
    after its call succeeded learns after the repair how the agreement ended (``outcome()``: the
    repair closed it, a member that had not entered it entering with 0) and makes the call again
    only if it failed, as the members that saw it end decided (before, one member made it again
    while its partner went on: a hang, 1 of 8 kills of rank 0 in ``bench/strangers/tp_setup.py``).
    ``held(result)`` is told of such a call before the repair (``DerivedRecords.pend``)."""
    keep = None  # (an in-place call's input, which a failed call may have overwritten)
    if op in IN_PLACE_KEPT and (args[0] if args else kwargs.get("sendbuf")) is MPI.IN_PLACE:
        keep = bytes(result_buffer(op, args, kwargs))
    out, failure, gave_up = _made_and_agreed(op, make, agree, outcome is not None)
    if failure is None:
        return out, False
    if gave_up and held is not None:
        held(out)
    recover(failure)
    if gave_up and outcome is not None and outcome():
        return out, False
    if keep is not None:
        result_buffer(op, args, kwargs)[:] = keep
    return again()(*args, **kwargs), True


def creation_between_runs(op: str, make: Callable[[], Any], agree: Callable[[int], int],
                          recover: Callable[[BaseException], None], again: Callable[[], Any],
                          let_go: Callable[[], None] = lambda: None) -> Any:
    """A derived communicator made from the active one between two dpmpi.Runtime runs (or in
    the prologue, with a Runtime made): ``make()``, then an agreement on its success, as for a
    collective (``between_runs``). On a failure no rank keeps what it made (where the creation
    completed, its handle is dropped and ``let_go()`` unpins it before the repair, so that no
    rank holds it and the repair forgets it everywhere), the Runtime repairs (``recover``), and
    every rank, a replacement too, makes it again (``again()``). Before, the failure was the
    program's and ended the job (a 2-D grid's row and column ``Split`` after a long load: 12 of
    12 kills from outside in ``bench/strangers/prologue_split.py``)."""
    made, failure, _gave_up = _made_and_agreed(op, make, agree)
    if failure is None:
        return made
    let_go()  # (nor keeps it for replacements)
    recover(failure)
    return again()


def _made_and_agreed(op: str, make: Callable[[], Any], agree: Callable[[int], int],
                     keep: bool = False) -> tuple[Any, BaseException | None, bool]:
    """``make()``, then the agreement on its success on every rank: (its result, None, False), or
    (None, the failure, whether this rank's call succeeded and its agreement gave up when a repair
    began: dpmpi's ``Agree`` raises ``RevokedError`` then) where some rank's call failed. On a
    failure this frame lets go of the result too (a failure's traceback keeps the frame, and a
    creation's result must not stay held through the repair: ``creation_between_runs``), but
    where it gave up and ``keep`` (the call may yet have succeeded everywhere: ``between_runs``)."""
    failure: BaseException | None = None
    out, gave_up = None, False
    try:
        out = make()
    except (ProcFailedError, RevokedError) as exc:
        failure = exc
    try:
        if agree(0 if failure else 1):
            return out, None, False
        failure = failure or ProcFailedError(f"a peer's {op}() failed between two runs", MPI.ERR_PROC_FAILED)
    except (ProcFailedError, RevokedError) as exc:
        gave_up = failure is None and isinstance(exc, RevokedError)
        failure = exc
    if not (keep and gave_up):
        out = None  # (no rank holds it: the repair forgets it, and the call is made anew everywhere)
    return out, failure, gave_up
