"""The default backend: NCCL through CuPy (``cupy.cuda.nccl``), on the current CUDA device.

Imported only when a GPU communicator is made without ``DPMPI_GPU_BACKEND=fake``: nothing of
``make test`` needs CuPy. Written against CuPy 14.2.0's bindings (``NcclCommunicator``,
``get_unique_id``, ``check_async_error``, ``abort``); NEVER RUN ON A GPU in this repository's
tests (no GPU there): ``bench/gpu_check.py`` is the prepared check.

- Communicators are blocking ones (CuPy cannot make nonblocking ones, and its ``NcclError``
  raises ``KeyError`` for NCCL codes 7 and 8, so ``NCCL_COMM_BLOCKING=0`` must not be set).
- Waits are ``cudaEventQuery`` (``Event.done``); nothing here synchronizes a stream.
- The unique id is 128 signed chars in CuPy (a tuple of ints); it travels as 128 bytes.
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np
from mpi4py import MPI

from dpmpi.gpu.backend import Backend, RawComm
from dpmpi.gpu.settings import ENV_BACKEND

_D2H, _H2D = 2, 1  # cudaMemcpyKind


def _import() -> Any:
    try:
        import cupy
    except ImportError as exc:
        raise ImportError(f"dpmpi.gpu needs CuPy with NCCL for its default backend: pip install 'dpmpi[gpu]' "
                          f"(cupy-cuda13x). Without a GPU, {ENV_BACKEND}=fake runs the same code on the CPU "
                          f"({exc})") from exc
    return cupy


def _import_nccl() -> Any:
    """CuPy's NCCL bindings: needed for communicators only (device snapshots do without)."""
    try:
        from cupy.cuda import nccl
    except ImportError as exc:
        raise ImportError(f"dpmpi.gpu: CuPy cannot load NCCL ({exc}); pip install 'dpmpi[gpu]' (nvidia-nccl-cu13)") \
            from exc
    if not getattr(nccl, "available", True):
        raise ImportError("dpmpi.gpu: CuPy was built without NCCL (cupy.cuda.nccl.available is False); pip install "
                          "'dpmpi[gpu]' (nvidia-nccl-cu13)")
    return nccl


def id_to_bytes(uid: Any) -> bytes:
    """CuPy's unique id (128 signed chars as ints) -> 128 bytes. Pure."""
    return bytes(int(x) & 0xFF for x in uid)


def id_from_bytes(raw: bytes) -> tuple[int, ...]:
    """128 bytes -> CuPy's unique id (signed chars: NcclCommunicator assigns them to char). Pure."""
    return tuple(b - 256 if b > 127 else b for b in raw)


def _host_ptr(buf: Any) -> tuple[int, int]:
    view = memoryview(buf).cast("B")
    return (np.frombuffer(view, np.uint8).ctypes.data if view.nbytes else 0), view.nbytes


class CupyComm(RawComm):
    """An ``NcclCommunicator`` (kept for the life of the process by NcclComm: never destroyed)."""

    def __init__(self, nccl: Any, comm: Any) -> None:
        self.nccl, self.c = nccl, comm
        self.rank, self.size = comm.rank_id(), comm.size()
        n = nccl
        self.dtypes = {"int8": n.NCCL_INT8, "uint8": n.NCCL_UINT8, "int32": n.NCCL_INT32, "uint32": n.NCCL_UINT32,
                       "int64": n.NCCL_INT64, "uint64": n.NCCL_UINT64, "float16": n.NCCL_FLOAT16,
                       "float32": n.NCCL_FLOAT32, "float64": n.NCCL_FLOAT64}
        self.ops = {"sum": n.NCCL_SUM, "prod": n.NCCL_PROD, "max": n.NCCL_MAX, "min": n.NCCL_MIN}

    def _t(self, a: Any) -> int:
        return self.dtypes[str(a.dtype)]

    def allreduce(self, send: Any, recv: Any, op: str, stream: Any) -> None:
        self.c.allReduce(send.data.ptr, recv.data.ptr, recv.size, self._t(recv), self.ops[op], stream.ptr)

    def bcast(self, buf: Any, root: int, stream: Any) -> None:
        self.c.broadcast(buf.data.ptr, buf.data.ptr, buf.size, self._t(buf), root, stream.ptr)

    def reduce(self, send: Any, recv: Any, op: str, root: int, stream: Any) -> None:
        self.c.reduce(send.data.ptr, recv.data.ptr, send.size, self._t(send), self.ops[op], root, stream.ptr)

    def allgather(self, send: Any, recv: Any, stream: Any) -> None:
        self.c.allGather(send.data.ptr, recv.data.ptr, send.size, self._t(send), stream.ptr)

    def reduce_scatter(self, send: Any, recv: Any, op: str, stream: Any) -> None:
        self.c.reduceScatter(send.data.ptr, recv.data.ptr, recv.size, self._t(recv), self.ops[op], stream.ptr)

    def send(self, buf: Any, dest: int, stream: Any) -> None:
        self.c.send(buf.data.ptr, buf.size, self._t(buf), dest, stream.ptr)

    def recv(self, buf: Any, source: int, stream: Any) -> None:
        self.c.recv(buf.data.ptr, buf.size, self._t(buf), source, stream.ptr)

    def async_error(self) -> str | None:
        try:
            self.c.check_async_error()
        except self.nccl.NcclError as exc:
            return str(exc)
        except KeyError as exc:  # CuPy's message table stops at code 6
            return f"NCCL error code {exc}"
        return None

    def abort(self) -> None:
        self.c.abort()  # CuPy forgets the handle: its __dealloc__ then destroys nothing


class CupyBackend(Backend):
    name = "cupy"

    def __init__(self) -> None:
        self.xp = _import()
        self.cuda = self.xp.cuda

    def unique_id(self) -> bytes:
        return id_to_bytes(_import_nccl().get_unique_id())

    def init(self, nranks: int, uid: bytes, rank: int, bootstrap: MPI.Comm) -> RawComm:
        nccl = _import_nccl()
        return CupyComm(nccl, nccl.NcclCommunicator(nranks, id_from_bytes(uid), rank))

    def stream(self, stream: Any = None) -> Any:
        return self.cuda.get_current_stream() if stream is None else stream

    def new_stream(self) -> Any:
        return self.cuda.Stream(non_blocking=True)

    def record(self, stream: Any) -> Any:
        event = self.cuda.Event(block=False, disable_timing=True)
        event.record(stream)
        return event

    def wait_event(self, stream: Any, event: Any) -> None:
        stream.wait_event(event)

    def event_done(self, event: Any) -> bool:
        return bool(event.done)  # cudaEventQuery

    def is_device(self, array: Any) -> bool:
        return isinstance(array, self.xp.ndarray)

    def zeros(self, shape: Any, dtype: Any) -> Any:
        return self.xp.zeros(shape, dtype)

    def to_numpy(self, array: Any) -> Any:
        return self.xp.asnumpy(array)

    def asarray(self, host: Any) -> Any:
        return self.xp.array(host, copy=True)

    def to_host_async(self, src: Any, dst: Any, stream: Any) -> None:
        ptr, n = _host_ptr(dst)
        if n != src.nbytes:
            raise ValueError(f"device -> host copy of {src.nbytes} bytes into a buffer of {n}")
        self.cuda.runtime.memcpyAsync(ptr, src.data.ptr, n, _D2H, stream.ptr)

    def to_device_async(self, src: Any, dst: Any, stream: Any) -> None:
        ptr, n = _host_ptr(src)
        if n != dst.nbytes:
            raise ValueError(f"host -> device copy of {n} bytes into a device array of {dst.nbytes}")
        self.cuda.runtime.memcpyAsync(dst.data.ptr, ptr, n, _H2D, stream.ptr)

    def register_host(self, buf: Any) -> Any:
        ptr, n = _host_ptr(buf)
        self.cuda.runtime.hostRegister(ptr, n, 0)  # cudaHostRegisterDefault
        return ptr

    def unregister_host(self, handle: Any) -> None:
        self.cuda.runtime.hostUnregister(handle)


def device_for_local_rank() -> int:
    """A device for this process: its node-local rank (OMPI_COMM_WORLD_LOCAL_RANK) modulo the
    devices (several ranks share one GPU when there are fewer GPUs than ranks)."""
    cupy = _import()
    local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0") or 0)
    return local % max(1, cupy.cuda.runtime.getDeviceCount())
