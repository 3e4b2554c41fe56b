"""``dpmpi.Comm``: an mpi4py communicator whose failures surface as dpmpi exceptions.

mpi4py's conventions are kept: upper-case methods take buffers, lower-case ones pickle Python
objects, and every other method and attribute of the wrapped communicator is passed through
(each call goes through the same error choke point, ``dpmpi.errors.from_mpi``). The ULFM
primitives keep MPI's names: ``Revoke``, ``Is_revoked``, ``Shrink``, ``Agree``, ``Iagree``,
``Ack_failed``, ``Get_failed``. Communicators and requests that methods return come back
wrapped (``dpmpi.Comm``, ``dpmpi.Request``); ``.mpi`` gives the raw mpi4py object.
"""
from __future__ import annotations

from typing import Any, Callable

from mpi4py import MPI

from dpmpi import _ft, _guard, _hooks
from dpmpi.errors import from_mpi
from dpmpi.mpicall import (TORN, cause_of, dropped_world_ranks, keep_forever, keep_pending, sendrecv, warm_up,
                           within_job)

# Methods that create a communicator, collectively over its members, on which dpmpi sends one
# small collective before handing it out (intracommunicators and intercommunicators): with Open
# MPI 5.0.11, a revoke that reaches a process still inside the call that creates the communicator
# (seen: in ompi_comm_activate, from Intercomm_create) makes it segfault in
# ompi_comm_revoke_local, and during a repair a second failure may revoke a communicator created a
# moment ago. Not here: Spawn, Spawn_multiple, Accept, Connect, Join (their other side is another
# job, whose program may not take part in a warm-up), Idup/Ishrink (not created when they return),
# and methods that return an existing communicator (Get_parent, f2py).
_WARM_UP = frozenset(
    {"Dup", "Dup_with_info", "Clone", "Split", "Split_type", "Create", "Create_group", "Create_from_group",
     "Create_intercomm", "Merge", "Shrink", "Create_cart", "Create_graph", "Create_dist_graph",
     "Create_dist_graph_adjacent", "Sub"}
)
# Methods whose arguments may be dpmpi objects that mpi4py must receive raw.
_UNWRAP_ARGS = frozenset({"Create_intercomm", "Compare"})


def _raw(obj: Any) -> Any:
    if isinstance(obj, (Comm, Request)):
        return obj.mpi
    return obj


def _raw_all(obj: Any) -> Any:
    """``_raw``, also of the items of a list or tuple (mpi4py's Request.Waitall(requests), ...).
    mpi4py completes the request objects themselves, so the wrappers see it too."""
    if isinstance(obj, (list, tuple)):
        return type(obj)(_raw(x) for x in obj)
    return _raw(obj)


def _convert(op: str, result: Any, raw: MPI.Comm | None = None) -> Any:
    if isinstance(result, MPI.Comm):
        if result == MPI.COMM_NULL:
            return result
        if op in _WARM_UP and within_job(result):
            warm_up(result, op)
        return Comm(result)
    if isinstance(result, MPI.Request):
        return Request(result, raw)
    if isinstance(result, tuple) and any(isinstance(r, (MPI.Comm, MPI.Request)) for r in result):
        return tuple(_convert(op, r, raw) for r in result)
    if isinstance(result, list) and result and isinstance(result[0], MPI.Request):
        return [Request(r, raw) for r in result]
    return result


def _translating(op: str, fn: Callable[..., Any], raw: MPI.Comm | None,
                 cause: Callable[[MPI.Exception], MPI.Exception] | None = None) -> Callable[..., Any]:
    """Wrap a bound mpi4py method: hooks, unwrapping, error translation, result wrapping.
    ``cause``: what the MPI error really was (e.g. a failed status of a Waitall)."""
    unwrap = op in _UNWRAP_ARGS
    pickled = op[:1].islower()  # mpi4py's lower-case calls carry pickled Python objects

    def invoke(args: tuple, kwargs: dict) -> Any:
        try:
            result = fn(*args, **kwargs)
        except MPI.Exception as exc:
            raise from_mpi(cause(exc) if cause else exc, raw, op) from exc
        except TORN as exc:  # a message a peer's death tore (as dpmpi.mpicall.exchange): its failure
            if not pickled:
                raise
            raise from_mpi(MPI.Exception(MPI.ERR_PROC_FAILED), raw, op) from exc
        # wrapped before the failure watcher may interrupt: a dpmpi.Request dropped while
        # pending keeps itself (and its buffer) alive
        return result if result is None else _convert(op, result, raw)

    def call(*args: Any, **kwargs: Any) -> Any:
        if unwrap:
            args = tuple(_raw(a) for a in args)
            kwargs = {k: _raw(v) for k, v in kwargs.items()}
        if not _hooks.on:
            return invoke(args, kwargs)
        _hooks.enter(op)
        due = False
        try:
            out = invoke(args, kwargs)
        finally:
            due = _hooks.leave()
        if due:  # a peer died during the call and the program asked to be interrupted
            _hooks.interrupt()
        return out

    call.__name__ = op
    call.__qualname__ = f"Comm.{op}"
    call.__doc__ = getattr(fn, "__doc__", None)
    return call


def _wrapped(owner: Any, name: str, get: Callable[[], Any], raw: MPI.Comm | None) -> Any:
    """``owner.name`` for a name ``owner`` does not define: ``get()``, the wrapped mpi4py object's
    attribute; a method is wrapped by ``_translating`` and cached on ``owner``, so later look-ups
    skip ``__getattr__``. Private names are not looked up."""
    if name.startswith("_"):
        raise AttributeError(name)
    attr = get()
    if not callable(attr):
        return attr
    wrapped = _translating(name, attr, raw)
    owner.__dict__[name] = wrapped
    return wrapped


class _Wrapper:
    """What dpmpi.Comm and dpmpi.Request share about the mpi4py object they wrap (``mpi``), as
    mpi4py's: false once freed (MPI.COMM_NULL), equal to what wraps or is the same handle
    (MPI.COMM_NULL included), unhashable (the handle changes when freed or repaired), and its
    public names in ``dir()``."""

    __slots__ = ()
    mpi: Any

    def __bool__(self) -> bool:
        return bool(self.mpi)

    def __eq__(self, other: object) -> bool:
        return self.mpi == _raw(other)

    __hash__ = None  # type: ignore[assignment]

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | {n for n in dir(self.mpi) if not n.startswith("_")})


class Comm(_Wrapper):
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
        return _wrapped(self, name, lambda: sendrecv(self._comm) if name == "Sendrecv" else getattr(self._comm, name),
                        self._comm)

    def __repr__(self) -> str:
        try:
            return f"<dpmpi.Comm rank {self._comm.Get_rank()} of {self._comm.Get_size()}>"
        except MPI.Exception:
            return "<dpmpi.Comm (unusable)>"

    def __reduce__(self) -> tuple:
        # mpi4py pickles the predefined communicators and refuses the others (ValueError)
        if type(self) is not Comm:
            raise TypeError(f"cannot pickle a {type(self).__name__}: it belongs to this process's repair state")
        return Comm, (self._comm,)

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
        returned. The world ranks dropped are recorded as recovered for the job's exit code.
        On an intercommunicator with Open MPI 5.0.x: ``NotImplementedError`` (its Shrink never
        returns there, and Ishrink hangs once the intercommunicator is revoked); shrink the
        intracommunicators it was made from and call ``Create_intercomm`` again."""
        if self._comm.Is_inter() and _ft.intercomm_shrink_hangs():
            raise NotImplementedError(
                "Shrink of an intercommunicator: Open MPI 5.0.x with ULFM never returns from it (upstream: "
                "open-mpi/ompi#12260); shrink the intracommunicators it was made from and call Create_intercomm again")
        new = self._call("Shrink", self._comm.Shrink)
        _guard.note_recovered(dropped_world_ranks(self._comm, new.mpi))
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
        watch = _hooks.watching()
        if watch:
            _hooks.watch_enter()
        due = False
        try:
            try:
                result = fn(*args)
            except MPI.Exception as exc:
                raise from_mpi(exc, self._comm, op) from exc
            out = result if result is None else _convert(op, result, self._comm)
        finally:
            if watch:
                due = _hooks.watch_leave()
        if due:
            _hooks.interrupt()
        return out


def rebind(comm: Comm, raw: MPI.Comm) -> None:
    """Point ``comm`` at ``raw`` in place (a repair rebuilds a communicator and the program's
    handles stay valid); the methods cached for the old communicator are dropped."""
    keep = {k: v for k, v in comm.__dict__.items() if k.startswith("_")}  # not the cached methods
    comm.__dict__.clear()
    comm.__dict__.update(keep, _comm=raw)


class Request(_Wrapper):
    """An mpi4py request whose completion errors are dpmpi exceptions.

    Behaves as the mpi4py request it wraps: every method passes through (errors translated),
    ``bool(req)`` is false once it is ``MPI.REQUEST_NULL`` (completed or freed), ``==`` compares
    handles (``req == MPI.REQUEST_NULL``), it is unhashable and pickles as mpi4py's does. The
    class methods (``Waitall``, ``Testany``, ``waitsome``, ``Startall``, ``f2py``, ...) take
    lists of dpmpi or mpi4py requests and return dpmpi requests. Not an ``MPI.Request``: give
    ``req.mpi`` to mpi4py functions that need one."""

    __slots__ = ("_req", "_comm", "__dict__", "__weakref__")

    def __init__(self, request: MPI.Request, comm: MPI.Comm | None = None) -> None:
        if isinstance(request, Request):
            request, comm = request.mpi, request._comm if comm is None else comm
        if not isinstance(request, MPI.Request):
            raise TypeError(f"dpmpi.Request wraps an mpi4py request, got {type(request).__name__}")
        self._req = request
        self._comm = comm

    @property
    def mpi(self) -> MPI.Request:
        return self._req

    def __getattr__(self, name: str) -> Any:
        return _wrapped(self, name, lambda: getattr(self._req, name), self._comm)

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


    def __reduce__(self) -> tuple:
        return Request, (self._req,)  # mpi4py refuses a pending request (ValueError)


_WAIT_ALL = ("Waitall", "Testall", "waitall", "testall")  # (requests, statuses=None)


def _class_op(cls: type, name: str) -> Callable[..., Any]:
    """mpi4py's class method ``cls.name`` on dpmpi objects: arguments unwrapped (lists too),
    errors translated (with the communicator of the first dpmpi request given), results wrapped."""
    fn = getattr(cls, name)

    def call(*args: Any, **kwargs: Any) -> Any:
        comm = None
        for a in (*args, *kwargs.values()):
            for item in a if isinstance(a, (list, tuple)) else (a,):
                if isinstance(item, Request) and comm is None:
                    comm = item._comm
        args = tuple(map(_raw_all, args))
        kwargs = {k: _raw_all(v) for k, v in kwargs.items()}
        cause = None
        if name in _WAIT_ALL and args:
            # statuses, so that MPI_ERR_IN_STATUS names its cause: a peer's death in a Waitall
            # was a plain DpmpiError that ended a Runtime job (a ring of Isend/Irecv, 3 of 10
            # runs with a rank killed from outside); requests left pending are kept, never freed
            requests = args[0]
            statuses = args[1] if len(args) > 1 else kwargs.get("statuses")
            if statuses is None:
                statuses = [MPI.Status() for _ in requests]
                args, kwargs = (args[0], statuses, *args[2:]), {k: v for k, v in kwargs.items() if k != "statuses"}

            def cause(exc: MPI.Exception) -> MPI.Exception:
                keep_pending(list(requests))
                return cause_of(exc, statuses)
        return _translating(name, fn, comm, cause)(*args, **kwargs)

    call.__name__ = name
    call.__qualname__ = f"{cls.__name__}.{name}"
    call.__doc__ = getattr(fn, "__doc__", None)
    return staticmethod(call)


for _name in ("Waitall", "Testall", "Waitany", "Testany", "Waitsome", "Testsome", "Get_status_all",
              "Get_status_any", "Get_status_some", "waitall", "testall", "waitany", "testany", "waitsome",
              "testsome", "get_status_all", "get_status_any", "get_status_some", "Startall", "f2py",
              "fromhandle", "fromint"):
    if hasattr(MPI.Prequest, _name):  # Prequest: Request's class methods and Startall
        setattr(Request, _name, _class_op(MPI.Prequest, _name))
# mpi4py's class methods of communicators (Comm.Get_parent(), Comm.f2py(...), ...); the instance
# methods pass through __getattr__
for _cls, _names in ((MPI.Comm, ("Get_parent", "Join", "f2py", "fromhandle", "fromint")),
                     (MPI.Intracomm, ("Create_from_group",)), (MPI.Intercomm, ("Create_from_groups",))):
    for _name in _names:
        if hasattr(_cls, _name):
            setattr(Comm, _name, _class_op(_cls, _name))


_WORLD: Comm | None = None


def world() -> Comm:
    """``dpmpi.COMM_WORLD``: a dpmpi.Comm wrapping MPI.COMM_WORLD (created once)."""
    global _WORLD
    if _WORLD is None:
        _WORLD = Comm(MPI.COMM_WORLD)
    return _WORLD
