"""MPI plumbing under dpmpi's communicators that needs no dpmpi object: the warm-up of a new
communicator, what the job's processes are, what MPI may still use (kept forever), the cause of a
failed Waitall, and a Sendrecv that Open MPI 5.0.x cannot crash on. Used by dpmpi.comm, the
repair (dpmpi.resilient) and the snapshot's replication.

Owner of state: ``_job_world`` (set once by ``dpmpi.init``, main thread) and ``_KEPT`` (appended
from any thread; a list append is atomic under the GIL; never freed)."""
from __future__ import annotations

import array
import ctypes
import pickle
import time
from typing import Any, Callable

from mpi4py import MPI

from dpmpi.errors import PEER_FAILURE_CLASSES, from_mpi


def warm_up(comm: MPI.Comm, op: str, watch: MPI.Comm | None = None, raise_failure: bool = False) -> None:
    """One Allreduce on a new communicator: no process returns from it before every process of
    the communicator (both groups of an intercommunicator) has entered it, so has finished
    creating the communicator; only then may anyone revoke it.

    ``watch``: a communicator that a repair revokes first (the job's active one). A creation that
    a death cut short can complete on some processes only (Open MPI's context-id agreement on the
    parent is not uniform): seen, in 1 of ~20 jobs that make communicators in every step, rank 0
    came out of a ``Split`` that failed on its partner, waited in this warm-up for it for ever,
    and the others waited for rank 0 in the repair's ``Shrink``. With ``watch`` the warm-up is
    waited for non-blocking, and when ``watch`` is revoked meanwhile (its peers went to repair)
    the new communicator is revoked too (any peer in this warm-up leaves it) and the revoke is
    raised: the creation failed here too, as it does when ``watch`` was revoked before the
    warm-up began (the peers left while this process was still inside the creation). Not for a
    ``Shrink``, which is made from a revoked communicator: its warm-up is not watched.

    ``raise_failure``: a peer's failure during the warm-up revokes the new communicator and is
    raised, for a caller that holds the communicator already (the snapshot's): handed out, its
    next collective waited for ever for a live peer that had gone to the repair (an allgather
    whose partner was alive: 5 hangs in 41 runs with a rank killed inside the snapshot's Dup)."""
    one, out = array.array("i", [1]), array.array("i", [0])
    try:
        if watch is None or watch == MPI.COMM_NULL or op == "Shrink":
            if comm.Is_inter():  # no IN_PLACE; each group receives the other group's sum
                comm.Allreduce(one, out, MPI.SUM)
            else:
                comm.Allreduce(MPI.IN_PLACE, one, MPI.SUM)
            return
        req = comm.Iallreduce(one, out, MPI.SUM) if comm.Is_inter() else comm.Iallreduce(MPI.IN_PLACE, one, MPI.SUM)
        if done_unless_revoked(req, watch):
            return
        keep_forever((comm, req, one, out))  # (still active on a revoked communicator: its buffers live on)
        _revoke_quietly(comm)
    except MPI.Exception as exc:
        # A peer may already have finished this collective and revoked the new communicator, or
        # a peer died: hand the communicator out anyway (its next operation reports that, and
        # it can be shrunk); raising here would lose the only handle to it.
        if exc.Get_error_class() not in PEER_FAILURE_CLASSES:
            raise from_mpi(exc, comm, f"{op} (first collective on the new communicator)") from exc
        if raise_failure:
            keep_forever(comm)  # (revoked: never freed)
            _revoke_quietly(comm)
            raise from_mpi(exc, comm, f"{op} (first collective on the new communicator)") from exc
        return
    exc = MPI.Exception(MPI.ERR_REVOKED)
    raise from_mpi(exc, watch, f"{op} (its peers left the new communicator's creation for a repair)") from exc


_SPIN = 2000  # tests of a warm-up before it naps between them (it completes in microseconds unless a peer is late)
_NAP = 50e-6


def done_unless_revoked(req: MPI.Request, watch: MPI.Comm) -> bool:
    """Wait for ``req``; False, with ``req`` still pending, once ``watch`` is revoked first."""
    tests = 0
    while not watch.Is_revoked():
        if req.Test():
            return True
        tests += 1
        if tests > _SPIN:
            time.sleep(_NAP)
    return False


def hold_context_id() -> None:
    """After a communicator's creation failed here: take the lowest free context id for good
    (a ``Dup`` of ``MPI.COMM_SELF``, local, kept for the life of the process). A creation that
    a death cut short can complete on the other processes (``warm_up`` says how), which then
    send on the new communicator (the warm-up, the revoke that ends it); here its context id was
    released, Open MPI parks messages for an id that no communicator has and delivers them to
    the next communicator created with it (docs/mpi-facts.md), which would be the repair's own
    (``Shrink``). Seen: a creation reported failed on one rank only (a test's fault,
    ``tests/programs/c/activate_faults.c``) ended the job in its repair in 4 of 30 runs
    without this, 0 of 32 with it."""
    try:
        keep_forever(MPI.COMM_SELF.Dup())
    except MPI.Exception:
        pass  # (nothing more to do: the failure is the caller's to raise)


def _revoke_quietly(comm: MPI.Comm) -> None:
    try:
        comm.Revoke()
    except MPI.Exception:
        pass  # (already revoked by a peer)


def warm_up_and(comm: MPI.Intracomm, words: list[int]) -> list[int]:
    """The warm-up of a new intracommunicator (``warm_up``) that also carries ``words``: their
    bitwise AND over every process of ``comm``. Unlike ``warm_up`` it raises a peer's failure
    (an ``MPI.Exception``): the caller cannot use the result then, and must start again."""
    buf = array.array("i", words)
    comm.Allreduce(MPI.IN_PLACE, buf, MPI.BAND)
    return list(buf)


# Gives the job's protocol communicator, set by ``dpmpi.init`` (dpmpi.resilient, which imports
# this module); None before. Set once, from the main thread.
_job_world: Callable[[], MPI.Comm] | None = None


def set_job_world(get: Callable[[], MPI.Comm]) -> None:
    """Called by ``dpmpi.init``: ``get()`` returns the job's protocol communicator (the live
    processes, replacements that a repair spawned included), which each repair replaces."""
    global _job_world
    _job_world = get


def resilient_job_comm() -> MPI.Comm:
    """The job's protocol communicator after ``dpmpi.init`` (repairs revoke it first), else
    ``MPI.COMM_NULL``."""
    return _job_world() if _job_world is not None else MPI.COMM_NULL


def job_comm() -> MPI.Comm:
    """The processes of this job: after ``dpmpi.init``, its protocol communicator, else
    MPI_COMM_WORLD."""
    world = resilient_job_comm()
    return world if world != MPI.COMM_NULL else MPI.COMM_WORLD


def within_job(comm: MPI.Comm) -> bool:
    """Whether every process of ``comm`` (both groups of an intercommunicator) belongs to this
    job. Those run this program, so they create ``comm`` through dpmpi too and take part in its
    warm-up; a process of another job (spawned by the program, or connected) may run anything,
    and would leave the warm-up hanging. Every member finds the same answer."""
    job = job_comm().Get_group()
    groups = [comm.Get_group()] + ([comm.Get_remote_group()] if comm.Is_inter() else [])
    try:
        return all(MPI.UNDEFINED not in MPI.Group.Translate_ranks(g, list(range(g.Get_size())), job) for g in groups)
    finally:
        for g in (job, *groups):
            g.Free()


# What MPI may still use and so must never be freed: requests left pending by a failed wait,
# with the buffers they hold (mpi4py keeps a pending request's buffer alive as long as the request
# object lives), and memory and threads of snapshot replications that a failure interrupted. The
# list itself is never freed, not even when the interpreter tears modules down (the exit guard
# ends MPI after that).
_KEPT: list = []
ctypes.pythonapi.Py_IncRef(ctypes.py_object(_KEPT))


def keep_forever(obj: Any) -> None:
    """Keep ``obj`` (and what it references) alive for the life of the process."""
    _KEPT.append(obj)


def exchange_handles(mine: Any, theirs: Any) -> None:
    """Exchange the MPI handles that two mpi4py objects of one kind hold, in place (mpi4py's
    ``MPI._addressof``: where the object keeps its handle). A repair puts a rebuilt
    communicator's (or a remade request's) handle into the object the program holds, so that its
    references stay valid; the other object then holds the replaced one."""
    a = ctypes.c_void_p.from_address(MPI._addressof(mine))
    b = ctypes.c_void_p.from_address(MPI._addressof(theirs))
    a.value, b.value = b.value, a.value


# What unpickling a message torn by a peer's death raises (seen: "invalid load key, '\\x00'"):
# mpi4py's lower-case calls unpickle what they received
TORN = (pickle.UnpicklingError, EOFError)


# What else unpickling a message that arrived in part raises: pickle.loads of a pickle whose tail
# is random bytes, 20000 tries, raised UnpicklingError or EOFError only 53 % of the time, then
# UnicodeDecodeError 40 %, OverflowError 5 %, TypeError, ValueError, AttributeError, MemoryError,
# ModuleNotFoundError, IndexError. A program's own objects can raise these too when unpickled, so
# they are taken for a peer's failure only while one is known (``torn``'s ``failure_known``).
GARBLED = (ValueError, OverflowError, TypeError, AttributeError, MemoryError, ImportError, LookupError)


def torn(exc: BaseException, failure_known: Callable[[], bool] = lambda: False) -> bool:
    """Whether ``exc``, raised while a lower-case call unpickled what it received, says the bytes
    were not a message a peer pickled, but one that a peer's death tore or left unwritten:
    ``TORN``; pickle's ``ValueError`` for a protocol that no pickler writes ("unsupported pickle
    protocol: 154", from bytes that begin with pickle's PROTO opcode, 0x80, then anything above
    5), which ended a healthy rank twice, in a survivor's ``allreduce`` while a peer died
    (docs/limitations.md: protocols 144 and 154; where such bytes came from is not known: mpi4py
    receives into memory it does not clear); or one of ``GARBLED`` while ``failure_known()``."""
    if isinstance(exc, TORN) or (isinstance(exc, ValueError) and str(exc).startswith("unsupported pickle protocol")):
        return True
    return isinstance(exc, GARBLED) and failure_known()


def exchange(call: Callable[[], Any]) -> Any:
    """Run ``call()``, a collective exchange of Python objects (mpi4py's lower-case allgather or
    bcast) inside a repair or a restore. A peer that dies during it can leave a survivor holding a
    torn message that fails to unpickle (seen: an UnpicklingError ended a healthy rank in 1 of 48
    chaos runs, and once before in the Runtime's own exchange); that is the peer failure it is, so
    it is raised as an MPI error of class ERR_PROC_FAILED, which the callers' failure handling
    takes (the unpickling error is its cause)."""
    try:
        return call()
    except MPI.Exception:
        raise
    except Exception as exc:
        raise MPI.Exception(MPI.ERR_PROC_FAILED) from exc


def retire(comm: MPI.Comm) -> None:
    """A communicator that a failure or a repair ended (revoked, or replaced): never freed, kept
    for the life of the process. Open MPI reuses a freed communicator's context id, and ob1 parks
    a message that arrives for a context id no communicator has (a peer's send posted before the
    revoke, delivered after the free) until a communicator with that id is created, then delivers
    it there as if it had been sent on it: a new communicator would take an old one's stale
    messages (the suspected cause of a replication seen never to complete after a repair, every
    process alive). A revoked communicator that still exists drops (or refuses) them instead."""
    if comm != MPI.COMM_NULL:
        _KEPT.append(comm)


def keep_pending(requests: list) -> None:
    """Keep the requests of a failed wait (and their buffers) for the life of the process."""
    _KEPT.extend(r for r in requests if r)


def cause_of(exc: MPI.Exception, statuses: list[MPI.Status]) -> MPI.Exception:
    """The error of a failed Waitall: for ERR_IN_STATUS, the first status that failed (not the
    ones still pending: seen, a peer's death reported as ERR_PENDING became a plain DpmpiError)."""
    if exc.Get_error_class() != MPI.ERR_IN_STATUS:
        return exc
    codes = [st.Get_error() for st in statuses if st.Get_error() not in (MPI.SUCCESS, MPI.ERR_PENDING)]
    return MPI.Exception(codes[0]) if codes else exc


def sendrecv(raw: MPI.Comm) -> Callable[..., None]:
    """``Sendrecv`` as Irecv + Isend + Waitall. Open MPI 5.0.x's MPI_Sendrecv cancels an
    uninitialised request when ``source`` is MPI_PROC_NULL and the send fails with an error
    other than ERR_PROC_FAILED (ERR_REVOKED, after a peer's failure): a segfault, seen here in a
    halo exchange at the edge of a decomposition. Same signature and semantics as mpi4py's."""

    def Sendrecv(sendbuf: Any, dest: int, sendtag: int = 0, recvbuf: Any = None, source: int = MPI.ANY_SOURCE,
                 recvtag: int = MPI.ANY_TAG, status: MPI.Status | None = None) -> None:
        if recvbuf is None:
            raise TypeError("Sendrecv needs a recvbuf (use sendrecv() for Python objects)")
        reqs = [raw.Irecv(recvbuf, source, recvtag), raw.Isend(sendbuf, dest, sendtag)]
        statuses = [status if status is not None else MPI.Status(), MPI.Status()]
        try:
            MPI.Request.Waitall(reqs, statuses)
        except MPI.Exception as exc:
            keep_pending(reqs)
            raise cause_of(exc, statuses) from exc

    Sendrecv.__doc__ = MPI.Comm.Sendrecv.__doc__
    return Sendrecv


def dropped_world_ranks(old: MPI.Comm, new: MPI.Comm) -> list[int]:
    """World ranks in ``old`` and not in ``new`` (a shrink's dropped processes)."""
    old_g, new_g, world_g = old.Get_group(), new.Get_group(), MPI.COMM_WORLD.Get_group()
    try:
        gone = MPI.Group.Difference(old_g, new_g)
        try:
            ranks = MPI.Group.Translate_ranks(gone, list(range(gone.Get_size())), world_g)
            return [r for r in ranks if r != MPI.UNDEFINED]
        finally:
            gone.Free()
    finally:
        for g in (old_g, new_g, world_g):
            g.Free()
