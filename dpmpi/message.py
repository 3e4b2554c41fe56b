"""``dpmpi.Message``: the message a matched probe returns (``comm.Mprobe``, ``Improbe``,
``mprobe``, ``improbe``, ``dpmpi.Message.Probe(comm, ...)``), an ``MPI.Message`` subclass whose
receives raise dpmpi's exceptions, and which is received into scratch memory when the program
drops it unreceived.

Why each part:
- Without it a matched receive (``msg.Recv``) whose sender died raised mpi4py's
  ``MPI.Exception(MPIX_ERR_PROC_FAILED)``: a program written to the README's primitives did
  not catch it. ``Recv``, ``Irecv``, ``recv`` and ``irecv`` pass through
  ``dpmpi.calls.translating`` (hooks, errors judged on the communicator the message was probed
  on; ``Irecv`` returns a ``dpmpi.Request``).
- A message matched and then never received leaves its sender's request waiting for ever: the
  receiver has taken it off the queue that a revoke empties, and Open MPI 5.0.11 does not fail a
  send whose message a peer has matched. A step that the failure watcher interrupted between
  ``Mprobe`` and ``msg.Recv`` left a live peer in the ``Wait`` of its send to this rank while the
  others waited for it in the repair's ``Shrink`` (``bench/strangers/mprobe_step.py``: 3 of 30
  runs with a rank killed from outside, ended by the repair deadline). So a dropped unreceived
  message (``__del__``), and at a repair every unreceived message of a revoked communicator
  (``drain_revoked``, called by the repair after its revokes), is received with ``Imrecv`` into
  scratch memory of its size (the probe's status, which dpmpi always asks for), the request and
  the memory kept for the life of the process (``dpmpi.mpicall.keep_forever``).

Owner: the program (each message object); ``_unreceived`` (weak references to the messages not
yet received, by ``id``: messages are not hashable) is touched by the program's threads, by the
repair in the thread that repairs, and by the collector (``__del__``, a weak reference's callback).
"""
from __future__ import annotations

import weakref
from typing import Any, Callable

from mpi4py import MPI

from dpmpi import request
from dpmpi.calls import raw, translating
from dpmpi.mpicall import keep_forever

PROBES = frozenset({"Mprobe", "Improbe", "mprobe", "improbe"})
_unreceived: dict[int, weakref.ref] = {}


class Message(MPI.Message):
    """An mpi4py message whose receives raise dpmpi exceptions (``error_comm``: the raw
    communicator it was probed on; ``nbytes``: its size, -1 when not known)."""

    def __new__(cls, message: MPI.Message | None = None, comm: MPI.Comm | None = None, nbytes: int = -1) -> Message:
        if message is not None and not isinstance(message, MPI.Message):
            raise TypeError(f"dpmpi.Message wraps an mpi4py message, got {type(message).__name__}")
        return MPI.Message.__new__(cls, message)

    def __init__(self, message: MPI.Message | None = None, comm: MPI.Comm | None = None, nbytes: int = -1) -> None:
        self.error_comm = comm
        self.nbytes = nbytes
        if nbytes >= 0 and _pending(self):
            key = id(self)
            _unreceived[key] = weakref.ref(self, lambda _ref: _unreceived.pop(key, None))

    def __repr__(self) -> str:
        return f"<dpmpi.Message handle {self.handle:#x}>"

    def __del__(self) -> None:
        try:
            _drain(self)
        except Exception:
            pass


def _pending(message: MPI.Message) -> bool:
    """Still to be received (not MESSAGE_NULL, nor MESSAGE_NO_PROC's empty message)."""
    return message != MPI.MESSAGE_NULL and message != MPI.MESSAGE_NO_PROC


def _drain(message: Message) -> None:
    """Receive ``message`` into scratch memory, if it is still pending; never waits."""
    if message.nbytes < 0 or not _pending(message) or MPI.Is_finalized():
        return
    scratch = bytearray(max(message.nbytes, 1))
    _unreceived.pop(id(message), None)
    try:
        keep_forever(MPI.Message.Irecv(message, [scratch, message.nbytes, MPI.BYTE]))  # (with its buffer)
    except MPI.Exception:
        pass  # (its sender is dead or the communicator unusable: nobody waits for it)


def drain_revoked() -> int:
    """Receive into scratch memory every unreceived message probed on a communicator that is
    revoked now (the repair calls it after revoking the program's communicators); returns how
    many."""
    drained = 0
    for ref in list(_unreceived.values()):
        message = ref()
        if message is None:
            continue
        comm = message.error_comm
        try:
            revoked = comm is not None and bool(comm) and comm.Is_revoked()
        except MPI.Exception:
            revoked = True
        if revoked and _pending(message):
            _drain(message)
            drained += 1
        elif not _pending(message):
            _unreceived.pop(id(message), None)
    return drained


def convert(op: str, result: Any, comm: MPI.Comm | None) -> Any:
    """What a receive of a message returns, as the program gets it: requests as dpmpi
    requests; a received object as it is."""
    if op in ("recv", "irecv") and not isinstance(result, MPI.Request):  # (pickled payloads are the program's)
        return result
    return request.convert(op, result, comm)


def probing(fn: Callable[..., Any], comm: MPI.Comm, first_status: int) -> Callable[..., Any]:
    """``fn``, a matched probe whose status is its argument ``first_status`` (0-based, or
    keyword ``status``), asked with a status always: it returns a ``Message`` that knows its
    size and its communicator (None from ``Improbe`` when nothing matched)."""

    def probe(*args: Any, **kwargs: Any) -> Any:
        args = list(args)
        status = args[first_status] if len(args) > first_status else kwargs.get("status")
        if status is None:
            status = MPI.Status()
            if len(args) > first_status:
                args[first_status] = status
            else:
                kwargs["status"] = status
        result = fn(*args, **kwargs)
        if not isinstance(result, MPI.Message):
            return result
        return Message(result, comm, status.Get_count(MPI.BYTE) if _pending(result) else -1)

    probe.__name__ = getattr(fn, "__name__", "probe")
    probe.__doc__ = getattr(fn, "__doc__", None)
    return probe


def _instance_op(name: str) -> Callable[..., Any]:
    fn = getattr(MPI.Message, name)

    def method(self: Message, *args: Any, **kwargs: Any) -> Any:
        try:
            return translating(name, fn.__get__(self), self.error_comm, convert)(*args, **kwargs)
        finally:
            if not _pending(self):
                _unreceived.pop(id(self), None)

    method.__name__ = name
    method.__qualname__ = f"Message.{name}"
    method.__doc__ = getattr(fn, "__doc__", None)
    return method


def _class_op(name: str) -> Callable[..., Any]:
    fn = getattr(MPI.Message, name)

    def call(comm: Any, *args: Any, **kwargs: Any) -> Any:
        comm = raw(comm)
        return translating(name, probing(lambda *a, **k: fn(comm, *a, **k), comm, 2), comm, convert)(*args, **kwargs)

    call.__name__ = name
    call.__qualname__ = f"Message.{name}"
    call.__doc__ = getattr(fn, "__doc__", None)
    return staticmethod(call)


for _name in ("Recv", "Irecv", "recv", "irecv"):
    setattr(Message, _name, _instance_op(_name))
for _name in ("Probe", "Iprobe", "probe", "iprobe"):
    setattr(Message, _name, _class_op(_name))
