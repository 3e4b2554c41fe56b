"""``Isendrecv`` and ``Isendrecv_replace`` whose request fails when a peer dies; ``Sendrecv_replace``
that cannot crash.

Open MPI 5.0.11's ``MPI_Isendrecv`` returns a request over a receive and a send of its own
(``ompi_comm_request``) that only the library polls, and ULFM fails a request only when a waiter
checks it: with a peer dead, or gone to a repair, the survivor's wait never ends (2 of 8 killed
runs of ``bench/strangers/isendrecv_step.py`` hung; ``Isendrecv(...).Wait()`` with the source
SIGKILLed never returned).

Here each call is an ordinary receive and an ordinary send: the send buffer is copied first
(``Isendrecv_replace`` must copy anyway), the receive is posted on the program's buffer, the send
from the copy, and the request the program gets is the receive's. Every wait sees it fail as it
sees an ``Irecv`` fail (dpmpi's, mpi4py's ``MPI.Request.Waitall`` over a mix), and its status is
the receive's, as ``MPI_Isendrecv``'s is. Once the request completes the program may reuse both
buffers, as MPI says: the send reads only the copy. The copy is a byte copy for a contiguous
buffer object and, for a buffer given with a count and a datatype (derived ones too), a message
to this process on a duplicate of ``COMM_SELF`` received as ``MPI_PACKED``; the send goes out as
``MPI_PACKED``, which matches any receive of the same type signature.

``Sendrecv_replace`` with ``source`` ``MPI_PROC_NULL`` (the ends of an open chain's halo exchange)
is a ``Send``: Open MPI 5.0.x's is then its ``MPI_Sendrecv``, which segfaults when the send fails
with ``ERR_REVOKED``. With any other source it is Open MPI's (which packs the send buffer itself).

What differs from ``MPI_Isendrecv``: a failure of the *send* alone (``dest`` dead, ``source``
alive) does not fail the request; the death reaches the program as every other death does (the
failure watcher, or its next call that involves that peer). Cancelling the request cancels the
receive; the send goes on.

Owner of state, all under ``_lock``, used by whichever thread calls ``Isendrecv``: ``_sends`` (the
sends still in flight, with their copies; tested at each call; a send that fails is kept, with
its copy, for the life of the process: ``mpicall.keep_forever``, invariant 4 of docs/threads.md),
``_free`` (up to ``POOL`` copies whose send completed, for reuse), ``_self`` (the copies'
duplicate of ``COMM_SELF``, made at the first copy that needs it, never freed). No thread of its
own.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any, Callable

from mpi4py import MPI

from dpmpi.mpicall import keep_forever

NAMES = frozenset({"Isendrecv", "Isendrecv_replace", "Sendrecv_replace"})
POOL = 4  # copies kept for reuse once their send completed (a fresh one page-faults on every page:
# 8 MiB exchanges took 3.5x Open MPI's Isendrecv with a new copy each, bench/isendrecv_cost.py)

_lock = threading.Lock()
# never freed, not even when the interpreter tears modules down (MPI ends after that), so that a
# send still in flight keeps its copy
_sends: list[tuple[MPI.Request, Any]] = []
ctypes.pythonapi.Py_IncRef(ctypes.py_object(_sends))
_free: list[Any] = []  # numpy uint8 copies no send uses, oldest first (at most POOL)
_self: MPI.Comm | None = None


def _reap() -> None:
    """Put back the copies of the sends that completed; keep for ever the sends that failed, with
    their copies: MPI may still read them (under ``_lock``)."""
    pending = []
    for req, copy in _sends:
        try:
            if not req.Test():
                pending.append((req, copy))
                continue
        except MPI.Exception:
            keep_forever((req, copy))
            continue
        _free.append(copy)
    _sends[:] = pending
    del _free[:-POOL]


def _give_back(copy: Any) -> None:
    with _lock:
        _free.append(copy)
        del _free[:-POOL]


def _take(nbytes: int) -> Any:
    """A copy buffer of at least ``nbytes`` bytes: the smallest free one that fits, else a new one
    (under ``_lock``)."""
    fits = [i for i, b in enumerate(_free) if len(b) >= nbytes]  # (by position: == of arrays is elementwise)
    if not fits:
        import numpy  # (its large arrays ask for huge pages: a bytearray copy of 8 MiB went out
        # 1.5-1.9x slower by the single-copy transport than the program's own numpy array)

        return numpy.empty(nbytes, dtype=numpy.uint8)
    return _free.pop(min(fits, key=lambda i: len(_free[i])))


def _self_comm() -> MPI.Comm:
    global _self
    if _self is None:
        _self = MPI.COMM_SELF.Dup()
        _self.Set_errhandler(MPI.ERRORS_RETURN)
    return _self


def _contiguous_bytes(buf: Any) -> memoryview | None:
    """``buf``'s bytes when it is a buffer object MPI would read whole (not a ``[buf, count,
    datatype]`` list), else None."""
    if isinstance(buf, (list, tuple)):
        return None
    try:
        view = memoryview(buf)
    except TypeError:
        return None
    if not view.c_contiguous:
        return None
    try:
        return view.cast("B") if view.ndim != 1 or view.format != "B" else view
    except (TypeError, ValueError):  # (a view memoryview cannot flatten: MPI's own copy below)
        return None


def packed_copy(buf: Any) -> tuple[Any, int]:
    """A copy of the message ``buf`` describes (any buffer specification mpi4py takes), as bytes
    to send with ``MPI_PACKED`` (the first ones of a buffer that may be longer), and their
    number."""
    view = _contiguous_bytes(buf)
    with _lock:
        _reap()
        if view is not None:
            copy = _take(view.nbytes)
            memoryview(copy)[:view.nbytes] = view
            return copy, view.nbytes
        comm = _self_comm()
        req = comm.Isend(buf, 0, 0)
        status = MPI.Status()
        try:
            msg = comm.Mprobe(0, 0, status)
            nbytes = status.Get_count(MPI.PACKED)
            copy = _take(nbytes)
            msg.Recv([copy, nbytes, MPI.PACKED])
        finally:
            req.Wait()
    return copy, nbytes


def _post(recv: MPI.Request, raw: MPI.Comm, copy: Any, nbytes: int, dest: int, tag: int) -> MPI.Request:
    """Post the send of ``copy`` after the receive ``recv``; ``recv`` is returned. A send that
    cannot start (a revoked communicator) raises, and the receive is kept, with the program's
    buffer, for the life of the process: the program never gets it, and MPI may still write."""
    try:
        send = raw.Isend([copy, nbytes, MPI.PACKED], dest, tag)
    except BaseException:
        if recv:
            keep_forever(recv)
        raise
    if not send:
        _give_back(copy)
        return recv
    with _lock:
        _sends.append((send, copy))
    return recv


def methods(raw: MPI.Comm) -> dict[str, Callable[..., Any]]:
    """``Isendrecv``, ``Isendrecv_replace`` (their requests the receives') and ``Sendrecv_replace``
    (a ``Send`` when ``source`` is ``MPI_PROC_NULL``) on ``raw``, with mpi4py's signatures."""

    def Isendrecv(sendbuf: Any, dest: int, sendtag: int = 0, recvbuf: Any = None, source: int = MPI.ANY_SOURCE,
                  recvtag: int = MPI.ANY_TAG) -> MPI.Request:
        if recvbuf is None:
            raise TypeError("Isendrecv needs a recvbuf")
        copy, nbytes = packed_copy(sendbuf)
        return _post(raw.Irecv(recvbuf, source, recvtag), raw, copy, nbytes, dest, sendtag)

    def Isendrecv_replace(buf: Any, dest: int, sendtag: int = 0, source: int = MPI.ANY_SOURCE,
                          recvtag: int = MPI.ANY_TAG) -> MPI.Request:
        copy, nbytes = packed_copy(buf)
        return _post(raw.Irecv(buf, source, recvtag), raw, copy, nbytes, dest, sendtag)

    def Sendrecv_replace(buf: Any, dest: int, sendtag: int = 0, source: int = MPI.ANY_SOURCE,
                         recvtag: int = MPI.ANY_TAG, status: MPI.Status | None = None) -> None:
        if source != MPI.PROC_NULL:
            raw.Sendrecv_replace(buf, dest, sendtag, source, recvtag, status)
            return
        # Open MPI 5.0.x's with source MPI_PROC_NULL is its MPI_Sendrecv, which cancels an
        # uninitialised request when the send fails with ERR_REVOKED: a segfault (seen here: 100000
        # doubles sent to a rank that had revoked the communicator). Receiving from MPI_PROC_NULL
        # changes nothing, so this is a Send, and the empty receive's status.
        raw.Send(buf, dest, sendtag)
        if status is not None:
            raw.Recv([bytearray(0), 0, MPI.BYTE], MPI.PROC_NULL, recvtag, status)

    Isendrecv.__doc__ = MPI.Comm.Isendrecv.__doc__
    Isendrecv_replace.__doc__ = MPI.Comm.Isendrecv_replace.__doc__
    Sendrecv_replace.__doc__ = MPI.Comm.Sendrecv_replace.__doc__
    return {"Isendrecv": Isendrecv, "Isendrecv_replace": Isendrecv_replace, "Sendrecv_replace": Sendrecv_replace}
