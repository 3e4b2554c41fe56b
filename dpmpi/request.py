"""``dpmpi.Request``: an mpi4py request (a subclass of ``MPI.Request``) whose methods raise
dpmpi's exceptions; ``dpmpi.Prequest`` for persistent requests. mpi4py's own functions take
them (``MPI.Request.Waitall(reqs)``); dpmpi's class methods (``dpmpi.Request.Waitall``) translate
errors and name a failed Waitall's cause.

Owner: the program (or the dpmpi code that made the request). A request dropped while MPI may
still use it is kept, with its buffer, for the life of the process (``__del__``).
"""
from __future__ import annotations

from typing import Any, Callable

from mpi4py import MPI

from dpmpi.calls import class_op, translating
from dpmpi.mpicall import keep_forever


class Request(MPI.Request):
    """An mpi4py request whose methods raise dpmpi exceptions.

    A subclass of ``MPI.Request`` (``MPI.Prequest`` for persistent requests: ``dpmpi.Prequest``)
    holding the request itself, not a copy: mpi4py's own functions take it
    (``MPI.Request.Waitall(reqs)`` completes it, with mpi4py's errors), its methods (``Wait``,
    ``Test``, ``Cancel``, ``Start``, ...) pass through ``dpmpi.errors.from_mpi``, and the class
    methods (``Waitall``, ``Testany``, ``waitsome``, ``Startall``, ``f2py``, ...) take lists of
    dpmpi or mpi4py requests, translate errors and return dpmpi requests. ``bool``, ``==``,
    hashing and pickling are mpi4py's. ``mpi`` is the request itself (as ``dpmpi.Comm.mpi``
    gives the raw communicator)."""

    def __new__(cls, request: MPI.Request | None = None, comm: MPI.Comm | None = None) -> Request:
        if request is not None and not isinstance(request, MPI.Request):
            raise TypeError(f"dpmpi.Request wraps an mpi4py request, got {type(request).__name__}")
        if cls is Request and isinstance(request, MPI.Prequest):
            cls = Prequest
        base = MPI.Prequest if issubclass(cls, MPI.Prequest) else MPI.Request
        # mpi4py copies the handle and the buffer reference; the object it came from is left to
        # the collector, which never frees a request in mpi4py 4 (no double ownership)
        return base.__new__(cls, request)

    def __init__(self, request: MPI.Request | None = None, comm: MPI.Comm | None = None) -> None:
        # the communicator on which its errors are judged (failed ranks, revoked)
        self.error_comm = request.error_comm if comm is None and isinstance(request, Request) else comm

    @property
    def mpi(self) -> MPI.Request:
        return self

    def __repr__(self) -> str:
        return f"<dpmpi.{type(self).__name__} handle {self.handle:#x}>"

    def __del__(self) -> None:
        # Dropped while MPI may still use it (e.g. a step interrupted by the failure watcher
        # between an Isend and its Wait): keep a copy of it (the handle and its buffer) for the
        # life of the process, so that the buffer outlives MPI's use (docs/threads.md, invariant 4).
        try:
            if MPI.Request.__bool__(self):
                keep_forever(MPI.Request(self))
        except Exception:
            pass


class Prequest(MPI.Prequest, Request):
    """A persistent request (``Send_init``, ``Recv_init``, ...): a ``dpmpi.Request`` and an
    ``MPI.Prequest``; ``Start`` and the partitioned calls raise dpmpi exceptions."""


def convert(op: str, result: Any, comm: MPI.Comm | None) -> Any:
    """A request method's result as the program gets it: requests as dpmpi requests."""
    if isinstance(result, MPI.Request):
        return Request(result, comm)
    if isinstance(result, list) and result and isinstance(result[0], MPI.Request):
        return [Request(r, comm) for r in result]
    return result


def _instance_op(base: type, name: str) -> Callable[..., Any]:
    """mpi4py's method ``base.name`` on a dpmpi request: errors translated (with the request's
    communicator), hooks as around every dpmpi call."""
    fn = getattr(base, name)

    def method(self: Request, *args: Any, **kwargs: Any) -> Any:
        return translating(name, fn.__get__(self), self.error_comm, convert)(*args, **kwargs)

    method.__name__ = name
    method.__qualname__ = f"{base.__name__}.{name}"
    method.__doc__ = getattr(fn, "__doc__", None)
    return method


def _instance_methods(cls: type) -> list[str]:
    """The public instance methods that mpi4py's class ``cls`` defines itself."""
    kinds = (type(MPI.Request.Wait),)  # method_descriptor (class methods are classmethod_descriptor)
    return [n for n, v in vars(cls).items() if not n.startswith("_") and isinstance(v, kinds)]


for _cls, _mine in ((MPI.Request, Request), (MPI.Prequest, Prequest)):
    for _name in _instance_methods(_cls):
        setattr(_mine, _name, _instance_op(_cls, _name))


for _name in ("Waitall", "Testall", "Waitany", "Testany", "Waitsome", "Testsome", "Get_status_all",
              "Get_status_any", "Get_status_some", "waitall", "testall", "waitany", "testany", "waitsome",
              "testsome", "get_status_all", "get_status_any", "get_status_some", "Startall", "f2py",
              "fromhandle", "fromint"):
    if hasattr(MPI.Prequest, _name):  # Prequest: Request's class methods and Startall
        setattr(Request, _name, class_op(MPI.Prequest, _name, convert))
        setattr(Prequest, _name, class_op(MPI.Prequest, _name, convert))  # (before MPI.Prequest's own)
