"""``dpmpi.Comm``: an mpi4py communicator whose failures surface as dpmpi exceptions.

mpi4py's conventions are kept: upper-case methods take buffers, lower-case ones pickle Python
objects, and every other method and attribute of the wrapped communicator is passed through
(each call goes through the same error choke point, ``dpmpi.errors.from_mpi``). The ULFM
primitives keep MPI's names: ``Revoke``, ``Is_revoked``, ``Shrink``, ``Agree``, ``Iagree``,
``Ack_failed``, ``Get_failed``. Communicators and requests that methods return come back
wrapped (``dpmpi.Comm``, ``dpmpi.Request``); ``.mpi`` gives the raw mpi4py object.
"""
from __future__ import annotations

import array
import ctypes
from typing import Any, Callable

from mpi4py import MPI

from dpmpi import _ft, _guard, _hooks
from dpmpi.errors import PEER_FAILURE_CLASSES, from_mpi

# Methods that create a communicator on which dpmpi sends one small collective before handing
# it out: with Open MPI 5.0.11, revoking a communicator that never carried traffic makes other
# ranks segfault (../shared/ulfm-facts.md), and during a repair a second failure may revoke a
# communicator created a moment ago.
_WARM_UP = frozenset(
    {"Dup", "Dup_with_info", "Split", "Split_type", "Create", "Create_group", "Shrink", "Merge"}
)
# Methods whose arguments may be dpmpi objects that mpi4py must receive raw.
_UNWRAP_ARGS = frozenset({"Create_intercomm", "Compare"})


def _raw(obj: Any) -> Any:
    if isinstance(obj, (Comm, Request)):
        return obj.mpi
    return obj


def _warm_up(comm: MPI.Intracomm, op: str) -> None:
    one = array.array("i", [1])
    try:
        comm.Allreduce(MPI.IN_PLACE, one, MPI.SUM)
    except MPI.Exception as exc:
        # A peer may already have finished this collective and revoked the new communicator, or
        # a peer died: hand the communicator out anyway (its next operation reports that, and
        # it can be shrunk); raising here would lose the only handle to it.
        if exc.Get_error_class() not in PEER_FAILURE_CLASSES:
            raise from_mpi(exc, comm, f"{op} (first collective on the new communicator)") from exc


def _convert(op: str, result: Any, raw: MPI.Comm | None = None) -> Any:
    if isinstance(result, MPI.Comm):
        if result == MPI.COMM_NULL:
            return result
        if op in _WARM_UP and isinstance(result, MPI.Intracomm):
            _warm_up(result, op)
        return Comm(result)
    if isinstance(result, MPI.Request):
        return Request(result, raw)
    if isinstance(result, tuple) and any(isinstance(r, (MPI.Comm, MPI.Request)) for r in result):
        return tuple(_convert(op, r, raw) for r in result)
    if isinstance(result, list) and result and isinstance(result[0], MPI.Request):
        return [Request(r, raw) for r in result]
    return result


def _translating(op: str, fn: Callable[..., Any], raw: MPI.Comm | None) -> Callable[..., Any]:
    """Wrap a bound mpi4py method: hooks, unwrapping, error translation, result wrapping."""
    unwrap = op in _UNWRAP_ARGS

    def call(*args: Any, **kwargs: Any) -> Any:
        if unwrap:
            args = tuple(_raw(a) for a in args)
            kwargs = {k: _raw(v) for k, v in kwargs.items()}
        if _hooks.on:
            _hooks.enter(op)
            due = False
            try:
                try:
                    result = fn(*args, **kwargs)
                except MPI.Exception as exc:
                    raise from_mpi(exc, raw, op) from exc
                # wrapped before the failure watcher may interrupt: a dpmpi.Request dropped
                # while pending keeps itself (and its buffer) alive
                out = result if result is None else _convert(op, result, raw)
            finally:
                due = _hooks.leave()
            if due:  # a peer died during the call and the program asked to be interrupted
                _hooks.interrupt()
            return out
        try:
            result = fn(*args, **kwargs)
        except MPI.Exception as exc:
            raise from_mpi(exc, raw, op) from exc
        return result if result is None else _convert(op, result, raw)

    call.__name__ = op
    call.__qualname__ = f"Comm.{op}"
    call.__doc__ = getattr(fn, "__doc__", None)
    return call


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


def _sendrecv(raw: MPI.Comm) -> Callable[..., None]:
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


class Comm:
    """A communicator whose failures raise ``ProcFailedError`` / ``RevokedError``.

    ``Comm(MPI.COMM_WORLD)`` wraps (it does not duplicate) an mpi4py communicator. Creating one
    that spans several processes checks, once per process, that the job is fault tolerant and
    raises ``FaultToleranceUnavailableError`` with the fix if it is not.
    """

    def __init__(self, comm: MPI.Comm | Comm) -> None:
        if isinstance(comm, Comm):
            comm = comm.mpi
        if not isinstance(comm, MPI.Comm):
            raise TypeError(
                f"dpmpi.Comm wraps an mpi4py communicator (e.g. MPI.COMM_WORLD), got {type(comm).__name__}"
            )
        if comm == MPI.COMM_NULL:
            raise ValueError("dpmpi.Comm cannot wrap MPI.COMM_NULL; pass a valid communicator")
        _ft.require(comm)
        self._comm = comm

    @property
    def mpi(self) -> MPI.Comm:
        """The wrapped mpi4py communicator."""
        return self._comm

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        attr = _sendrecv(self._comm) if name == "Sendrecv" else getattr(self._comm, name)
        if not callable(attr):
            return attr
        wrapped = _translating(name, attr, self._comm)
        self.__dict__[name] = wrapped  # later look-ups skip __getattr__
        return wrapped

    def __repr__(self) -> str:
        try:
            return f"<dpmpi.Comm rank {self._comm.Get_rank()} of {self._comm.Get_size()}>"
        except MPI.Exception:
            return "<dpmpi.Comm (unusable)>"

    def __eq__(self, other: object) -> bool:
        return self._comm == _raw(other)

    def __hash__(self) -> int:
        return hash(MPI._handleof(self._comm))

    # --- ULFM, under MPI's names -------------------------------------------------------------
    def Revoke(self) -> None:
        """Revoke the communicator on every rank: pending and future operations on it fail with
        ``RevokedError`` everywhere (local call, propagates in the background)."""
        self._call("Revoke", self._comm.Revoke)

    def Is_revoked(self) -> bool:
        """Whether the communicator has been revoked (local)."""
        return bool(self._call("Is_revoked", self._comm.Is_revoked))

    def Shrink(self) -> Comm:
        """Collective over the live ranks: a new communicator without the failed ones.

        Works on a revoked communicator. The new one has carried one collective before it is
        returned. The world ranks dropped are recorded as recovered for the job's exit code."""
        new = self._call("Shrink", self._comm.Shrink)
        _guard.note_recovered(_dropped_world_ranks(self._comm, new.mpi))
        return new

    def Agree(self, flag: int) -> int:
        """Fault-tolerant agreement: the bitwise AND of ``flag`` over the live ranks.

        Raises ``ProcFailedError`` while a failure has not been acknowledged (``Ack_failed``)."""
        if isinstance(flag, bool) or not isinstance(flag, int):
            raise TypeError(f"Agree(flag) takes an int (bits to AND across ranks), got {type(flag).__name__}")
        return int(self._call("Agree", self._comm.Agree, flag))

    def Iagree(self, flag: Any) -> Request:
        """Non-blocking ``Agree``; ``flag`` is a one-int buffer (e.g. ``array('i', [1])``)
        that holds the result when the returned request completes."""
        try:
            view = memoryview(flag)
        except TypeError:
            raise TypeError(
                f"Iagree(flag) takes a writable one-int buffer such as array('i', [1]), got {type(flag).__name__}"
            ) from None
        if view.readonly or view.nbytes != 4:
            raise ValueError("Iagree(flag) needs a writable buffer of exactly one 32-bit int, e.g. array('i', [1])")
        return self._call("Iagree", self._comm.Iagree, flag)

    def Ack_failed(self, num_to_ack: int | None = None) -> int:
        """Acknowledge the failures known locally (all of them by default); returns how many
        failures are acknowledged in total."""
        if num_to_ack is not None and (isinstance(num_to_ack, bool) or not isinstance(num_to_ack, int) or num_to_ack < 0):
            raise ValueError(f"Ack_failed(num_to_ack) takes None or an int >= 0, got {num_to_ack!r}")
        return int(self._call("Ack_failed", self._comm.Ack_failed, num_to_ack))

    def Get_failed(self) -> MPI.Group:
        """The group of ranks known locally to have failed (local knowledge)."""
        return self._call("Get_failed", self._comm.Get_failed)

    def failed_ranks(self) -> tuple[int, ...]:
        """Ranks of this communicator known locally to have failed."""
        from dpmpi.errors import failed_ranks

        return failed_ranks(self._comm)

    def _call(self, op: str, fn: Callable[..., Any], *args: Any) -> Any:
        # (no fault points here; the failure watcher's marks only, as around every call)
        watch = _hooks._watch_enter is not None
        if watch:
            _hooks._watch_enter()
        due = False
        try:
            try:
                result = fn(*args)
            except MPI.Exception as exc:
                raise from_mpi(exc, self._comm, op) from exc
            out = result if result is None else _convert(op, result, self._comm)
        finally:
            if watch:
                due = _hooks._watch_leave()
        if due:
            _hooks.interrupt()
        return out


def _dropped_world_ranks(old: MPI.Comm, new: MPI.Comm) -> list[int]:
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


class Request:
    """An mpi4py request whose completion errors are dpmpi exceptions."""

    __slots__ = ("_req", "_comm", "__dict__")

    def __init__(self, request: MPI.Request, comm: MPI.Comm | None = None) -> None:
        if not isinstance(request, MPI.Request):
            raise TypeError(f"dpmpi.Request wraps an mpi4py request, got {type(request).__name__}")
        self._req = request
        self._comm = comm

    @property
    def mpi(self) -> MPI.Request:
        return self._req

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        attr = getattr(self._req, name)
        if not callable(attr):
            return attr
        wrapped = _translating(name, attr, self._comm)
        self.__dict__[name] = wrapped
        return wrapped

    def __repr__(self) -> str:
        return f"<dpmpi.Request {self._req!r}>"

    def __del__(self) -> None:
        # Dropped while MPI may still use it (e.g. a step interrupted by the failure watcher
        # between an Isend and its Wait): mpi4py would free the request while its buffer may go
        # away; keep both for the life of the process instead (docs/threads.md, invariant 4).
        try:
            if self._req:
                keep_forever(self._req)
        except Exception:
            pass

    @staticmethod
    def _all(op: str, requests: list[Request | MPI.Request], *args: Any) -> Any:
        raw = [_raw(r) for r in requests]
        if _hooks.on:
            _hooks.enter(op)
            due = False
            try:
                try:
                    result = getattr(MPI.Request, op)(raw, *args)
                except MPI.Exception as exc:
                    raise from_mpi(exc, None, op) from exc
            finally:
                due = _hooks.leave()
            if due:
                _hooks.interrupt()
            return result
        try:
            return getattr(MPI.Request, op)(raw, *args)
        except MPI.Exception as exc:
            raise from_mpi(exc, None, op) from exc

    @staticmethod
    def Waitall(requests: list[Request | MPI.Request], statuses: list[MPI.Status] | None = None) -> bool:
        return Request._all("Waitall", requests, statuses)

    @staticmethod
    def Testall(requests: list[Request | MPI.Request], statuses: list[MPI.Status] | None = None) -> bool:
        return Request._all("Testall", requests, statuses)

    @staticmethod
    def Waitany(requests: list[Request | MPI.Request], status: MPI.Status | None = None) -> int:
        return Request._all("Waitany", requests, status)

    @staticmethod
    def waitall(requests: list[Request | MPI.Request], statuses: list[MPI.Status] | None = None) -> list[Any]:
        return Request._all("waitall", requests, statuses)


_WORLD: Comm | None = None


def world() -> Comm:
    """``dpmpi.COMM_WORLD``: a dpmpi.Comm wrapping MPI.COMM_WORLD (created once)."""
    global _WORLD
    if _WORLD is None:
        _WORLD = Comm(MPI.COMM_WORLD)
    return _WORLD
