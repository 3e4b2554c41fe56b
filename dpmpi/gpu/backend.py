"""The interface between ``NcclComm`` and a backend that runs NCCL operations.

Two backends implement it: ``cupy_backend`` (NCCL through CuPy's ``cupy.cuda.nccl``, the
default) and ``fake`` (``DPMPI_GPU_BACKEND=fake``: host numpy buffers stand in for device
arrays, MPI point-to-point messages carry the collectives, streams and events are simulated).
``NcclComm`` and ``devsnap`` run the same code over either.

A backend enqueues work on a stream and never waits for it: the caller records an event after
the work and polls it (``event_done``) together with the NCCL async error, dpmpi's failure
notices and a deadline (``dpmpi.gpu.poll``). Nothing here may block on the device.
"""
from __future__ import annotations

import abc
from typing import Any

from mpi4py import MPI

#: reduction names, and the mpi4py ops that mean the same
OPS = ("sum", "prod", "max", "min")
_MPI_OPS = ((MPI.SUM, "sum"), (MPI.PROD, "prod"), (MPI.MAX, "max"), (MPI.MIN, "min"))  # (Op is unhashable)
#: numpy dtype names NCCL reduces (bfloat16 has no numpy dtype)
DTYPES = ("int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32", "float64")


def op_name(op: Any) -> str:
    """``"sum"``/``MPI.SUM`` -> ``"sum"``; anything else is refused clearly."""
    if isinstance(op, str) and op.lower() in OPS:
        return op.lower()
    for mop, name in _MPI_OPS:
        if isinstance(op, MPI.Op) and op == mop:
            return name
    raise ValueError(f"NCCL reduces with one of {', '.join(OPS)} (or MPI.SUM/PROD/MAX/MIN), got {op!r}")


def check_array(backend: Any, what: str, name: str, a: Any) -> Any:
    """``a`` if it is a C-contiguous device array of ``backend`` with a dtype NCCL takes."""
    if not backend.is_device(a):
        raise TypeError(f"NcclComm.{what}: {name} must be a device array of the {backend.name} backend "
                        f"(e.g. a cupy.ndarray), got {type(a).__module__}.{type(a).__name__}")
    if not a.flags.c_contiguous:
        raise ValueError(f"NcclComm.{what}: {name} must be C-contiguous")
    if str(a.dtype) not in DTYPES:
        raise TypeError(f"NcclComm.{what}: {name} has dtype {a.dtype}; NCCL takes {', '.join(DTYPES)}")
    return a


def check_pair(backend: Any, what: str, sendbuf: Any, recvbuf: Any, ratio: tuple[int, int],
               size: int) -> tuple[Any, Any]:
    """Checked (send, recv) (``MPI.IN_PLACE``: send is recv): same dtype, and
    send.size * ratio[0] == recv.size * ratio[1]."""
    recv = check_array(backend, what, "recvbuf", recvbuf)
    send = recv if sendbuf is MPI.IN_PLACE else check_array(backend, what, "sendbuf", sendbuf)
    if send.dtype != recv.dtype:
        raise TypeError(f"NcclComm.{what}: sendbuf is {send.dtype}, recvbuf is {recv.dtype}")
    if send.size * ratio[0] != recv.size * ratio[1]:
        raise ValueError(f"NcclComm.{what}: sendbuf has {send.size} elements, recvbuf {recv.size}; over "
                         f"{size} ranks they must be in the ratio {ratio[1]}:{ratio[0]}")
    return send, recv


class RawComm(abc.ABC):
    """One NCCL communicator of a backend (owned by one ``NcclComm``; used from the thread that
    issues its NCCL calls, the main thread)."""

    rank: int
    size: int

    @abc.abstractmethod
    def allreduce(self, send: Any, recv: Any, op: str, stream: Any) -> None: ...

    @abc.abstractmethod
    def bcast(self, buf: Any, root: int, stream: Any) -> None: ...

    @abc.abstractmethod
    def reduce(self, send: Any, recv: Any, op: str, root: int, stream: Any) -> None: ...

    @abc.abstractmethod
    def allgather(self, send: Any, recv: Any, stream: Any) -> None: ...

    @abc.abstractmethod
    def reduce_scatter(self, send: Any, recv: Any, op: str, stream: Any) -> None: ...

    @abc.abstractmethod
    def send(self, buf: Any, dest: int, stream: Any) -> None: ...

    @abc.abstractmethod
    def recv(self, buf: Any, source: int, stream: Any) -> None: ...

    @abc.abstractmethod
    def async_error(self) -> str | None:
        """The NCCL asynchronous error, as text (None: none). Never blocks."""

    @abc.abstractmethod
    def abort(self) -> None:
        """ncclCommAbort: local, frees the communicator; its pending work is abandoned."""


class Backend(abc.ABC):
    """Arrays, streams, events and communicators of one kind of device."""

    name: str
    xp: Any  # the array module (cupy, or numpy for the fake)

    @abc.abstractmethod
    def unique_id(self) -> bytes:
        """A fresh ncclUniqueId (128 bytes); the process that made it hosts the bootstrap."""

    @abc.abstractmethod
    def init(self, nranks: int, uid: bytes, rank: int, bootstrap: MPI.Comm) -> RawComm:
        """ncclCommInitRank. ``bootstrap`` is the MPI communicator of the same ranks (the fake
        carries its collectives on a duplicate of it; NCCL ignores it)."""

    @abc.abstractmethod
    def stream(self, stream: Any = None) -> Any:
        """The stream to enqueue on: ``stream`` itself, or the current stream when None."""

    @abc.abstractmethod
    def new_stream(self) -> Any:
        """A new non-blocking stream (for copies that must not wait for the program's work)."""

    @abc.abstractmethod
    def record(self, stream: Any) -> Any:
        """An event that completes when the work enqueued on ``stream`` so far has completed."""

    @abc.abstractmethod
    def wait_event(self, stream: Any, event: Any) -> None:
        """Make ``stream``'s later work wait for ``event`` (cudaStreamWaitEvent: on the device,
        the host does not wait)."""

    @abc.abstractmethod
    def event_done(self, event: Any) -> bool:
        """Whether the event completed (cudaEventQuery). Never blocks."""

    @abc.abstractmethod
    def is_device(self, array: Any) -> bool:
        """Whether ``array`` is one of this backend's device arrays."""

    @abc.abstractmethod
    def zeros(self, shape: Any, dtype: Any) -> Any: ...

    @abc.abstractmethod
    def to_numpy(self, array: Any) -> Any:
        """A host copy of a device array whose work has completed (synchronous)."""

    @abc.abstractmethod
    def asarray(self, host: Any) -> Any:
        """A device copy of a host array (synchronous; for setting up, not for steps)."""

    @abc.abstractmethod
    def to_host_async(self, src: Any, dst: Any, stream: Any) -> None:
        """Enqueue a device -> host copy into ``dst`` (a registered/pinned host buffer)."""

    @abc.abstractmethod
    def to_device_async(self, src: Any, dst: Any, stream: Any) -> None:
        """Enqueue a host -> device copy."""

    @abc.abstractmethod
    def register_host(self, buf: Any) -> Any:
        """Page-lock an existing host buffer (cudaHostRegister); returns a handle."""

    @abc.abstractmethod
    def unregister_host(self, handle: Any) -> None:
        """cudaHostUnregister (before the memory is freed)."""
