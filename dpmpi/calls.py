"""How a call into mpi4py made through a dpmpi object runs: its arguments unwrapped, the failure
watcher's marks around it (``dpmpi._hooks``), its MPI error translated at the one choke point
(``dpmpi.errors.from_mpi``), its result wrapped (by the caller's ``convert``). Used by
``dpmpi.comm`` (communicators) and ``dpmpi.request`` (requests); no state of its own."""
from __future__ import annotations

from typing import Any, Callable

from mpi4py import MPI

from dpmpi import _hooks
from dpmpi.errors import failure_known, from_mpi
from dpmpi.mpicall import cause_of, keep_pending, torn

# Methods whose arguments may be dpmpi objects that mpi4py must receive raw.
_UNWRAP_ARGS = frozenset({"Create_intercomm", "Compare"})
Convert = Callable[[str, Any, Any], Any]  # (op, result, the raw communicator) -> what the program gets


class Wrapper:
    """What a dpmpi object that wraps an mpi4py one (``mpi``; dpmpi.Comm) has of it, as
    mpi4py's: false once freed (MPI.COMM_NULL), equal to what wraps or is the same handle
    (MPI.COMM_NULL included), unhashable (the handle changes when freed or repaired), and its
    public names in ``dir()``."""

    __slots__ = ()
    mpi: Any

    def __bool__(self) -> bool:
        return bool(self.mpi)

    def __eq__(self, other: object) -> bool:
        return self.mpi == raw(other)

    __hash__ = None  # type: ignore[assignment]

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | {n for n in dir(self.mpi) if not n.startswith("_")})


def raw(obj: Any) -> Any:
    """The mpi4py object for ``obj`` (a dpmpi.Request is one already)."""
    return obj.mpi if isinstance(obj, Wrapper) else obj


def raw_all(obj: Any) -> Any:
    """``raw``, also of the items of a list or tuple (mpi4py's Request.Waitall(requests), ...)."""
    if isinstance(obj, (list, tuple)):
        return type(obj)(raw(x) for x in obj)
    return raw(obj)


def translating(op: str, fn: Callable[..., Any], comm: MPI.Comm | None, convert: Convert,
                cause: Callable[[MPI.Exception], MPI.Exception] | None = None) -> Callable[..., Any]:
    """Wrap a bound mpi4py method: hooks, unwrapping, error translation (failed ranks judged on
    ``comm``), result wrapping (``convert``). ``cause``: what the MPI error really was (e.g. a
    failed status of a Waitall)."""
    unwrap = op in _UNWRAP_ARGS
    pickled = op[:1].islower()  # mpi4py's lower-case calls carry pickled Python objects

    def invoke(args: tuple, kwargs: dict) -> Any:
        try:
            result = fn(*args, **kwargs)
        except MPI.Exception as exc:
            raise from_mpi(cause(exc) if cause else exc, comm, op) from exc
        except Exception as exc:  # a message a peer's death tore (as dpmpi.mpicall.exchange): its failure
            if not pickled or not torn(exc, lambda: failure_known(comm)):
                raise
            raise from_mpi(MPI.Exception(MPI.ERR_PROC_FAILED), comm, op) from exc
        # wrapped before the failure watcher may interrupt: a dpmpi.Request dropped while
        # pending keeps a copy of itself (and its buffer) alive
        return result if result is None else convert(op, result, comm)

    def call(*args: Any, **kwargs: Any) -> Any:
        if unwrap:
            args = tuple(raw(a) for a in args)
            kwargs = {k: raw(v) for k, v in kwargs.items()}
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


_WAIT_ALL = ("Waitall", "Testall", "waitall", "testall")  # (requests, statuses=None)


def class_op(cls: type, name: str, convert: Convert) -> Callable[..., Any]:
    """mpi4py's class method ``cls.name`` on dpmpi objects: arguments unwrapped (lists too),
    errors translated (with the ``error_comm`` of the first dpmpi request given), results
    wrapped (``convert``)."""
    fn = getattr(cls, name)

    def call(*args: Any, **kwargs: Any) -> Any:
        comm = None
        for a in (*args, *kwargs.values()):
            for item in a if isinstance(a, (list, tuple)) else (a,):
                if comm is None:
                    comm = getattr(item, "error_comm", None)
        args = tuple(map(raw_all, args))
        kwargs = {k: raw_all(v) for k, v in kwargs.items()}
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
        return translating(name, fn, comm, convert, cause)(*args, **kwargs)

    call.__name__ = name
    call.__qualname__ = f"{cls.__name__}.{name}"
    call.__doc__ = getattr(fn, "__doc__", None)
    return staticmethod(call)
