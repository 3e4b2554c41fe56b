"""Point-to-point messages in the prologue, logged by their senders, so that a replacement's own
receives there are answered.

A program's setup often exchanges with its neighbours: a halo filled once, a partition's boundary
sizes sent to the next rank, a ring of ``Sendrecv``. A replacement runs the program from its
start, but its survivors are past their setup: before the forty-fifth session its first such call
raised ``ReplayError`` and the job went on without it. Now every active rank logs what it sends
on the communicator ``dpmpi.init()`` returned and on the intracommunicators derived from it,
outside dpmpi.Runtime's runs, while its prologue records (``Send``, ``Ssend``, ``Bsend``,
``Rsend``, either case, their non-blocking forms, and the send of a ``Sendrecv``/``sendrecv``/
``Sendrecv_replace``), by communicator and destination (its logical rank), and a repair that
calls replacements in hands each one the messages its surviving peers sent to its rank (one
allgather, with the derived communicators' records: ``prologue_derived.hand_over``). While it
replays a part of the program its survivors finished, its receive from a survivor is answered
from that log (in the order sent, by tag: MPI's non-overtaking rule; an ``Irecv``'s buffer at
once, its request complete), and its send to a survivor is not made (the survivor received it
before the failure) but logged, for a later replacement of that peer. With a peer that is a
replacement of the same repair both make their calls for real, as they run the same program. Not
covered (``ReplayError``, as before): a receive from ``MPI.ANY_SOURCE`` (the order in which the
failed rank matched its senders is lost with it), a part of the program its survivors were still
in when they failed (a message sent there may not have been received: ``point_to_point``), a
lower-case ``irecv`` from a survivor, probes, an intercommunicator's messages. A point-to-point
call in the setup also ends dpmpi.init's watch of the setup, as before
(``setup.SetupWatch.clean``): a death in it is the program's.

Owner and lifetime: one ``P2PRecords`` per process, in ``Prologue.p2p``, main thread only (a
repair stages what it hands over, on the main thread too); kept for the life of the process, as
the prologue's record.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from mpi4py import MPI

from dpmpi import config
from dpmpi.request import Request
from dpmpi.resilient import msgspec
from dpmpi.resilient.prologue_calls import ReplayError, refused

if TYPE_CHECKING:
    from dpmpi.resilient.prologue import Prologue

ENV_MAX = "DPMPI_PROLOGUE_MAX"

SENDS = frozenset({"Send", "Ssend", "Bsend", "Rsend", "send", "ssend", "bsend",
                   "Isend", "Issend", "Ibsend", "Irsend", "isend", "issend", "ibsend"})
RECVS = frozenset({"Recv", "recv", "Irecv", "irecv"})
BOTH = frozenset({"Sendrecv", "sendrecv", "Sendrecv_replace"})
P2P = SENDS | RECVS | BOTH
NONBLOCKING = frozenset({"Isend", "Issend", "Ibsend", "Irsend", "isend", "issend", "ibsend", "Irecv", "irecv"})
_SIGNATURES = {  # mpi4py's parameters, in order, with their defaults (None: required)
    "send": (("buf", None), ("dest", None), ("tag", 0)),
    "recv": (("buf", None), ("source", MPI.ANY_SOURCE), ("tag", MPI.ANY_TAG), ("status", None)),
    "irecv": (("buf", None), ("source", MPI.ANY_SOURCE), ("tag", MPI.ANY_TAG)),
    "Sendrecv": (("sendbuf", None), ("dest", None), ("sendtag", 0), ("recvbuf", None), ("source", MPI.ANY_SOURCE),
                 ("recvtag", MPI.ANY_TAG), ("status", None)),
    "Sendrecv_replace": (("buf", None), ("dest", None), ("sendtag", 0), ("source", MPI.ANY_SOURCE),
                         ("recvtag", MPI.ANY_TAG), ("status", None)),
}


class Msg(NamedTuple):
    tag: int
    pickled: bool  # lower case (a pickled object) or a buffer's bytes
    payload: bytes | None  # None: could not be read (``why``)
    segment: int  # dpmpi.Runtime.run calls made before it
    why: str = ""


class Call(NamedTuple):
    """What a point-to-point call sends and receives (``parse``)."""

    send: tuple[Any, int, int] | None  # (object or buffer, dest, tag)
    recv: tuple[Any, int, int, Any] | None  # (buffer or None, source, tag, status)
    pickled: bool


def parse(op: str, args: tuple, kwargs: dict) -> Call:
    """A call ``op`` of ``P2P`` as mpi4py reads its arguments."""
    key = ("send" if op in SENDS else "irecv" if op in ("Irecv", "irecv") else "recv" if op in RECVS
           else "Sendrecv_replace" if op == "Sendrecv_replace" else "Sendrecv")
    names = _SIGNATURES[key]
    if len(args) > len(names):
        raise TypeError(f"{op}() takes at most {len(names)} arguments")
    got = {name: (args[i] if i < len(args) else kwargs.get(name, kwargs.get(_alias(op, name), default)))
           for i, (name, default) in enumerate(names)}
    if key == "send":
        return Call((got["buf"], int(got["dest"]), int(got["tag"])), None, op[0].islower())
    if key in ("recv", "irecv"):
        return Call(None, (got["buf"], int(got["source"]), int(got["tag"]), got.get("status")), op[0].islower())
    if key == "Sendrecv_replace":
        return Call((got["buf"], int(got["dest"]), int(got["sendtag"])),
                    (got["buf"], int(got["source"]), int(got["recvtag"]), got["status"]), False)
    return Call((got["sendbuf"], int(got["dest"]), int(got["sendtag"])),
                (got["recvbuf"], int(got["source"]), int(got["recvtag"]), got["status"]), op[0].islower())


def _alias(op: str, name: str) -> str:
    """mpi4py's keyword for the object a lower-case call sends."""
    return "obj" if name == "buf" and op in SENDS and op[0].islower() else "sendobj" if name == "sendbuf" else name


def message(sent: tuple[Any, int, int], pickled: bool, segment: int) -> Msg:
    """What the sender logs of a message (never fails the program's call: an unreadable buffer
    is logged with why, and a replacement is told at its receive)."""
    obj, _dest, tag = sent
    try:
        data = MPI.pickle.dumps(obj) if pickled else bytes(msgspec.region(obj))
    except Exception as exc:
        return Msg(tag, pickled, None, segment, f"its buffer could not be read ({exc})")
    return Msg(tag, pickled, data, segment)


Key = tuple  # (the communicator's place: -1 for the one dpmpi.init() returned, else its recipe's; a logical rank)


class P2PRecords:
    """This process's log of the messages it sent in its prologue (see the module) and, on a
    replacement, those its survivors sent to its rank."""

    def __init__(self) -> None:
        self.sent: dict[Key, list[Msg]] = {}  # (place, destination's logical rank) -> messages, in order
        self.got: dict[Key, list[Msg]] = {}  # a replacement: (place, source's logical rank) -> messages to it
        self.used: dict[Key, set[int]] = {}  # a replacement: the messages it received, by key
        self.fresh: set[int] = set()  # a replacement: the logical ranks its repair's replacements took
        self.staged: tuple[dict[Key, list[Msg]], set[int]] | None = None  # handed, not yet adopted
        self.count = 0
        self.made = False  # this rank made such a call in its prologue

    def __bool__(self) -> bool:
        return bool(self.sent)

    def log(self, key: Key, msg: Msg) -> int:
        """A message this rank sent (or, a replacement, did not send: its peer had it). Its bytes."""
        self.sent.setdefault(key, []).append(msg)
        self.count += 1
        return len(msg.payload or b"")

    def take(self, key: Key, tag: int, segment: int) -> Msg | None:
        """A replacement's receive from ``key`` with ``tag`` (or ``MPI.ANY_TAG``) in ``segment``:
        the first message not yet received that matches it, in the order sent, or None."""
        used = self.used.setdefault(key, set())
        for i, msg in enumerate(self.got.get(key, [])):
            if i not in used and msg.segment == segment and (tag == MPI.ANY_TAG or msg.tag == tag):
                used.add(i)
                return msg
        return None

    # -- a repair's side --
    def offers(self, mine: int, wanted: set[int]) -> list[tuple[int, int, int, list[Msg]]]:
        """What the survivor with logical rank ``mine`` brings to a repair whose replacements take
        the ranks ``wanted``: (``mine``, place, rank, the messages it sent to that rank there). Pure."""
        return [(mine, place, dest, list(msgs)) for (place, dest), msgs in sorted(self.sent.items()) if dest in wanted]

    def stage(self, brought: list[list[tuple[int, int, int, list[Msg]]]], me: int, wanted: list[int]) -> None:
        """A replacement that takes logical rank ``me``: the messages sent to it, until the prologue adopts them."""
        got = {(place, src): [Msg(*m) for m in msgs] for offered in brought for src, place, dest, msgs in offered
               if dest == me}
        self.staged = (got, set(wanted))

    def remap(self, old: list[int], renumber: dict[int, int]) -> None:
        """The repair kept the derived communicators' recipes at ``old`` (new place ``i`` was
        ``old[i]``) and renumbered the logical ranks (old -> new; those not in it are gone)."""
        def moved(log: dict[Key, list[Msg]]) -> dict[Key, list[Msg]]:
            return {(p if p < 0 else old.index(p), renumber[r]): msgs for (p, r), msgs in log.items()
                    if r in renumber and (p < 0 or p in old)}
        self.sent = moved(self.sent)
        if self.staged is not None:
            self.staged = (moved(self.staged[0]), {renumber[r] for r in self.staged[1] if r in renumber})

    def adopt(self, replays: bool) -> None:
        """The prologue took the handed record (``replays``) or not."""
        if replays and self.staged is not None:
            self.got, self.fresh = self.staged
            self.used = {}
        self.staged = None


class Peers(NamedTuple):
    """The communicator a call is made on, as the log names it."""

    place: int  # -1: the one dpmpi.init() returned
    members: tuple[int, ...] | None  # a derived communicator's members' logical ranks (None: ranks are logical)

    def key(self, rank: int) -> Key:
        return self.place, (rank if self.members is None else self.members[rank])


def replayed(records: P2PRecords, op: str, args: tuple, kwargs: dict, segment: int, answers: bool,
             plain_of: Callable[[str], Callable[..., Any]], on: Peers) -> Any:
    """A replacement's call ``op`` on ``on`` while it replays (``answers``: the part of the program
    it is in is one its survivors finished): its receive from a survivor answered from the log,
    its send to a survivor logged and not made; with a peer that is a replacement of its repair,
    made for real (``plain_of(name)``: the communicator's own method)."""
    call = parse(op, args, kwargs)
    name = f"comm.{op}()" if on.members is None else f"{op}() on a derived communicator"
    peers = ([call.send[1]] if call.send else []) + ([call.recv[1]] if call.recv else [])
    real = {MPI.PROC_NULL} | {p for p in peers if p >= 0 and on.key(p)[1] in records.fresh}
    if all(p in real for p in peers):
        out = plain_of(op)(*args, **kwargs)  # (every peer is a replacement of this repair: made as asked)
        if call.send is not None and call.send[1] != MPI.PROC_NULL:
            records.log(on.key(call.send[1]), message(call.send, call.pickled, segment))
        return out
    if not answers:
        raise ReplayError(refused(name, "the survivors failed in the part of the program it is in, where a message "
                                        "sent may not have been received"))
    if call.recv is not None and call.recv[1] == MPI.ANY_SOURCE:
        raise ReplayError(refused(name, "a receive from MPI.ANY_SOURCE (the order in which the failed rank matched "
                                        "its senders is lost with it)"))
    done = Request(MPI.REQUEST_NULL) if op in NONBLOCKING else None  # (answered: complete at once)
    if op == "irecv":  # (its request's wait() would return no object)
        raise ReplayError(refused(name, "a lower-case irecv from a survivor (use recv, or Irecv into a buffer)"))
    if call.send is not None and call.send[1] != MPI.PROC_NULL:
        msg = message(call.send, call.pickled, segment)  # (read before a Sendrecv_replace overwrites it)
        if call.send[1] in real:
            plain_of("send" if call.pickled else "Send")(call.send[0], call.send[1], call.send[2])
        records.log(on.key(call.send[1]), msg)
    if call.recv is None:
        return done
    buf, source, tag, status = call.recv
    if source in real:
        return plain_of("recv" if call.pickled else "Recv")(buf, source, tag, status)
    msg = records.take(on.key(source), tag, segment)
    if msg is None or msg.payload is None:
        why = msg.why if msg is not None else f"rank {source} logged no such message to this rank (tag {tag})"
        raise ReplayError(refused(name, why))
    if status is not None:
        status.Set_source(source)
        status.Set_tag(msg.tag)
        status.Set_elements(MPI.BYTE, len(msg.payload))
    if call.pickled:
        return MPI.pickle.loads(msg.payload)
    try:
        out = msgspec.region(buf)
    except (TypeError, ValueError) as exc:
        raise ReplayError(refused(name, f"its buffer cannot be written from the log ({exc})")) from exc
    if out.readonly or out.nbytes < len(msg.payload):
        raise ReplayError(refused(name, "its buffer is read-only" if out.readonly else
                                  f"its buffer holds {out.nbytes} bytes, the message {len(msg.payload)}"))
    out[:len(msg.payload)] = msg.payload
    return done


def point_to_point(prologue: Prologue, op: str, fn: Callable[..., Any], args: tuple, kwargs: dict,
                   plain_of: Callable[[str], Callable[..., Any]], on: Peers = Peers(-1, None)) -> Any:
    """The program's call ``op`` (of ``P2P``) on ``on`` in the prologue: on a replacement
    replaying, ``replayed``; elsewhere made, its send logged first while the prologue records (a
    ``Sendrecv_replace`` overwrites what it sent)."""
    if prologue.replaying is not None:
        answers = not (prologue.between and prologue.runs == max(prologue.target - 1, 0) and not prologue.inside)
        return replayed(prologue.p2p, op, args, kwargs, prologue.runs, answers, plain_of, on)
    try:
        call = parse(op, args, kwargs) if prologue.recording else None
    except (TypeError, ValueError):  # (arguments mpi4py refuses: its own error, below)
        call = None
    if call is None:
        return fn(*args, **kwargs)
    msg = message(call.send, call.pickled, prologue.runs) if call.send and call.send[1] != MPI.PROC_NULL else None
    out = fn(*args, **kwargs)
    prologue.p2p.made = True  # (dpmpi.init's watch of the setup ends: setup.SetupWatch.clean)
    if call.recv is not None and call.recv[1] == MPI.ANY_SOURCE:  # (a replacement could not: told at the end)
        prologue.unreplayable(op, on.members is not None)
    if msg is not None and call.send is not None:
        prologue.size += prologue.p2p.log(on.key(call.send[1]), msg)
        prologue.full = prologue.size > int(config.get(ENV_MAX)) or prologue.p2p.count >= prologue.max_calls()
    return out
