"""The fake GPU backend (``DPMPI_GPU_BACKEND=fake``): the GPU path's code runs on a CPU.

- Device arrays are host numpy arrays of a marker subclass (``DeviceArray``), made by the
  backend (``zeros``, ``asarray``); arithmetic on them keeps the subclass.
- Streams are FIFOs of operations; an event completes when every operation enqueued on its
  stream before it has completed. Nothing runs until an event is polled (``event_done``): an
  operation that was posted may finish any time later, as on a device.
- Collectives are MPI point-to-point messages on the communicator's own duplicate of the
  bootstrap communicator, received into the fake's own buffers and reduced in rank order (the
  same bits on every rank, as NCCL gives). A peer that died, or a revoke, does *not* end the
  operation: it stays pending forever, as an NCCL kernel spins when a peer inside the node died;
  the failure has to be seen from outside (``dpmpi.gpu.poll``).
- Faults (``DPMPI_GPU_FAKE_FAULTS="RANK:POINT[@N]:KIND,..."``; RANK is the world rank, a process
  fails only in its first life, as with ``DPMPI_FAULTS``): ``collective@N:HANG`` (this rank's N-th
  collective never runs: every peer's spins too), ``collective@N:ASYNC_ERROR`` (the N-th
  collective raises the NCCL async error and never completes), ``abort@N:HANG`` (the N-th abort
  never returns).

Owner and lifetime: every object here is used by the main thread only; an aborted communicator's
pending operations (and their buffers, which MPI may still write) are kept until the process ends.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from mpi4py import MPI

from dpmpi import faults
from dpmpi.comm import Comm
from dpmpi.gpu import settings
from dpmpi.gpu.backend import Backend, RawComm

_TAG_COLL = 3101
_TAG_P2P = 3102
_UFUNCS = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}
_ABANDONED: list = []  # pending operations of aborted communicators: MPI may still write their buffers
KINDS = {"collective": ("HANG", "ASYNC_ERROR"), "abort": ("HANG",)}


class DeviceArray(np.ndarray):
    """A fake device array: a host numpy array the fake backend treats as device memory."""


# ---- faults ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FakeFault:
    rank: int
    point: str  # "collective" | "abort"
    count: int
    kind: str  # "HANG" | "ASYNC_ERROR"


def parse_faults(spec: str) -> list[FakeFault]:
    """``"1:collective@5:HANG,0:abort:HANG"`` -> faults. Pure; a bad item is refused by name."""
    out = []
    for item in (p.strip() for p in spec.split(",")):
        if not item:
            continue
        fields = [f.strip() for f in item.split(":")]
        if len(fields) != 3 or not fields[0].isdigit():
            raise ValueError(f"{settings.ENV_FAKE_FAULTS}: bad fault {item!r}; write RANK:POINT[@N]:KIND, "
                             f"e.g. 1:collective@5:HANG")
        point, _, n = fields[1].partition("@")
        kind = fields[2].upper()
        if point not in KINDS or kind not in KINDS[point]:
            raise ValueError(f"{settings.ENV_FAKE_FAULTS}: bad fault {item!r}; points and kinds: "
                             + "; ".join(f"{p}: {', '.join(k)}" for p, k in KINDS.items()))
        if n and (not n.isdigit() or int(n) < 1):
            raise ValueError(f"{settings.ENV_FAKE_FAULTS}: bad fault {item!r}; @N is an int >= 1")
        out.append(FakeFault(int(fields[0]), point, int(n or 1), kind))
    return out


class _Plan:
    """This process's fake faults and the counts of the points reached (main thread)."""

    def __init__(self, spec: str) -> None:
        mine = [f for f in parse_faults(spec) if f.rank == faults.my_rank()] if faults.first_life() else []
        self.faults = mine
        self.counts = {p: 0 for p in KINDS}

    def reach(self, point: str) -> str | None:
        self.counts[point] += 1
        for f in self.faults:
            if f.point == point and f.count == self.counts[point]:
                faults.point(f"fake-{point}")  # (lets a plain DPMPI_FAULTS plan fire here too)
                return f.kind
        return None


# ---- streams and events ------------------------------------------------------------------------
class _Op:
    """One enqueued operation: its MPI requests and what to do when they complete."""

    __slots__ = ("reqs", "finish", "stuck", "keep", "owner")

    def __init__(self, reqs: list, finish: Callable[[], None] | None, keep: tuple = (), stuck: bool = False,
                 owner: Any = None) -> None:
        self.reqs, self.finish, self.keep, self.stuck, self.owner = reqs, finish, keep, stuck, owner

    def test(self) -> bool:
        if self.stuck:
            return False
        try:
            if self.reqs and not MPI.Request.Testall(self.reqs):
                return False
        except MPI.Exception:
            self.stuck = True  # a dead peer or a revoke: an NCCL kernel would spin; so does this
            return False
        if self.finish is not None:
            self.finish()
        return True


class _WaitOp(_Op):
    """A stream waits for another stream's event (cudaStreamWaitEvent)."""

    __slots__ = ()

    def __init__(self, backend: FakeBackend, event: FakeEvent) -> None:
        super().__init__([], None, (backend, event))

    def test(self) -> bool:
        backend, event = self.keep
        return backend.event_done(event)


class FakeStream:
    """Operations run in order; ``done`` counts the completed ones."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.queue: list[_Op] = []
        self.enqueued = 0
        self.done = 0

    def put(self, op: _Op) -> None:
        self.queue.append(op)
        self.enqueued += 1

    def progress(self) -> None:
        while self.queue and self.queue[0].test():
            self.queue.pop(0)
            self.done += 1


@dataclass(frozen=True)
class FakeEvent:
    stream: FakeStream
    seq: int  # complete when stream.done >= seq


# ---- the communicator --------------------------------------------------------------------------
def _flat(a: Any) -> np.ndarray:
    return np.asarray(a).reshape(-1)


class FakeComm(RawComm):
    """A fake NCCL communicator: collectives over a duplicate of the bootstrap communicator."""

    def __init__(self, backend: FakeBackend, nranks: int, uid: bytes, rank: int, bootstrap: MPI.Comm) -> None:
        self.backend = backend
        self.comm = Comm(bootstrap).Dup().mpi  # warmed up; this communicator's own
        self.rank, self.size = rank, nranks
        if (self.comm.Get_rank(), self.comm.Get_size()) != (rank, nranks):
            raise ValueError(f"fake NCCL init: rank {rank} of {nranks} over an MPI communicator where this process "
                             f"is rank {self.comm.Get_rank()} of {self.comm.Get_size()}")
        ids = self.comm.allgather(bytes(uid))
        if any(i != ids[0] for i in ids):  # as ncclCommInitRank, every rank must hold the same id
            raise RuntimeError("fake NCCL init: the ranks were given different unique ids")
        self.error: str | None = None
        self.aborted = False

    def _post(self, stream: Any, post: Callable[[list], tuple[Callable[[], None] | None, tuple]],
              collective: bool = True) -> None:
        """Enqueue one operation: ``post(reqs)`` posts its messages (appending each request to
        ``reqs`` as soon as it exists) and returns (what to do at completion, buffers to keep)."""
        if self.aborted:
            raise RuntimeError("this NCCL communicator was aborted")
        kind = self.backend.plan.reach("collective") if collective else None
        if kind == "HANG":
            stream.put(_Op([], None, stuck=True, owner=self))
            return
        reqs: list = []
        try:
            finish, keep = post(reqs)
            op = _Op(reqs, finish, keep, owner=self)
        except MPI.Exception:
            _ABANDONED.append(reqs)  # the requests posted before the error (they hold their buffers)
            op = _Op([], None, stuck=True, owner=self)  # posting to a dead peer: spins as well
        if kind == "ASYNC_ERROR":
            self.error = "unhandled system error (injected by the fake backend)"
            op.stuck = True
        stream.put(op)

    def _exchange(self, reqs: list, chunks: Callable[[int], np.ndarray], count: int, dtype: Any) -> dict:
        """Send ``chunks(p)`` to every peer p and receive ``count`` elements from each."""
        parts = {}
        for p in range(self.size):
            if p == self.rank:
                continue
            parts[p] = np.empty(count, dtype)
            reqs.append(self.comm.Irecv(parts[p], p, _TAG_COLL))
            reqs.append(self.comm.Isend(chunks(p), p, _TAG_COLL))
        return parts

    def _reduced(self, mine: np.ndarray, parts: dict[int, np.ndarray], op: str) -> np.ndarray:
        fn, acc = _UFUNCS[op], None
        for r in range(self.size):
            part = mine if r == self.rank else parts[r]
            acc = part.copy() if acc is None else fn(acc, part)
        return acc

    def _into(self, reqs: list, buf: np.ndarray, source: int, tag: int) -> tuple:
        """Receive into the fake's own buffer; copy into ``buf`` only at completion."""
        tmp = np.empty_like(buf)
        reqs.append(self.comm.Irecv(tmp, source, tag))
        return lambda: buf.__setitem__(slice(None), tmp), (tmp,)

    def allreduce(self, send: Any, recv: Any, op: str, stream: Any) -> None:
        s, out = _flat(send), _flat(recv)

        def post(reqs: list) -> tuple:
            parts = self._exchange(reqs, lambda p: s, s.size, s.dtype)
            return lambda: out.__setitem__(slice(None), self._reduced(s, parts, op)), (s, parts)

        self._post(stream, post)

    def bcast(self, buf: Any, root: int, stream: Any) -> None:
        b = _flat(buf)

        def post(reqs: list) -> tuple:
            if self.rank != root:
                return self._into(reqs, b, root, _TAG_COLL)
            for p in range(self.size):
                if p != root:
                    reqs.append(self.comm.Isend(b, p, _TAG_COLL))
            return None, (b,)

        self._post(stream, post)

    def reduce(self, send: Any, recv: Any, op: str, root: int, stream: Any) -> None:
        s = _flat(send)
        out = _flat(recv) if self.rank == root else None

        def post(reqs: list) -> tuple:
            if self.rank != root:
                reqs.append(self.comm.Isend(s, root, _TAG_COLL))
                return None, (s,)
            parts = {}
            for p in range(self.size):
                if p != root:
                    parts[p] = np.empty(s.size, s.dtype)
                    reqs.append(self.comm.Irecv(parts[p], p, _TAG_COLL))
            return lambda: out.__setitem__(slice(None), self._reduced(s, parts, op)), (s, parts)

        self._post(stream, post)

    def allgather(self, send: Any, recv: Any, stream: Any) -> None:
        s, out = _flat(send), _flat(recv)
        n = s.size

        def finish(parts: dict[int, np.ndarray]) -> None:
            for r in range(self.size):
                out[r * n:(r + 1) * n] = s if r == self.rank else parts[r]

        def post(reqs: list) -> tuple:
            parts = self._exchange(reqs, lambda p: s, n, s.dtype)
            return lambda: finish(parts), (s, parts)

        self._post(stream, post)

    def reduce_scatter(self, send: Any, recv: Any, op: str, stream: Any) -> None:
        s, out = _flat(send), _flat(recv)
        n = out.size

        def post(reqs: list) -> tuple:
            chunk = lambda p: s[p * n:(p + 1) * n]  # noqa: E731
            parts = self._exchange(reqs, chunk, n, s.dtype)
            mine = chunk(self.rank)
            return lambda: out.__setitem__(slice(None), self._reduced(mine, parts, op)), (s, parts)

        self._post(stream, post)

    def send(self, buf: Any, dest: int, stream: Any) -> None:
        b = _flat(buf)

        def post(reqs: list) -> tuple:
            reqs.append(self.comm.Isend(b, dest, _TAG_P2P))
            return None, (b,)

        self._post(stream, post, collective=False)

    def recv(self, buf: Any, source: int, stream: Any) -> None:
        b = _flat(buf)
        self._post(stream, lambda reqs: self._into(reqs, b, source, _TAG_P2P), collective=False)

    def async_error(self) -> str | None:
        return self.error

    def abort(self) -> None:
        if self.aborted:
            return
        if self.backend.plan.reach("abort") == "HANG":
            while True:  # a hung ncclCommAbort: only a deadline outside ends it
                time.sleep(3600)
        self.aborted = True
        for stream in self.backend.streams:  # its kernels end: the streams run on
            for i, op in enumerate(stream.queue):
                if op.owner is self:
                    _ABANDONED.append(op)  # MPI may still write its buffers
                    stream.queue[i] = _Op([], None)  # (NcclComm never takes aborted work as done)
        # (no revoke: a peer's operation stays pending as its kernel would spin; its own wait
        # learns of the failure from outside, e.g. from this rank's revoked probe)


# ---- the backend -------------------------------------------------------------------------------
class FakeBackend(Backend):
    name = "fake"
    xp = np

    def __init__(self) -> None:
        self.plan = _Plan(settings.fake_faults())
        self.default = FakeStream("default")
        self.streams: list[FakeStream] = [self.default]
        self.registered: dict[int, int] = {}  # address -> length of "page-locked" host buffers

    def unique_id(self) -> bytes:
        return os.urandom(128)

    def init(self, nranks: int, uid: bytes, rank: int, bootstrap: MPI.Comm) -> RawComm:
        return FakeComm(self, nranks, uid, rank, bootstrap)

    def stream(self, stream: Any = None) -> Any:
        if stream is None:
            return self.default
        if not isinstance(stream, FakeStream):
            raise TypeError(f"the fake backend takes its own streams (backend.new_stream()), got {type(stream).__name__}")
        return stream

    def new_stream(self) -> Any:
        s = FakeStream(f"stream-{len(self.streams)}")
        self.streams.append(s)
        return s

    def record(self, stream: Any) -> Any:
        return FakeEvent(stream, stream.enqueued)

    def wait_event(self, stream: Any, event: Any) -> None:
        stream.put(_WaitOp(self, event))

    def event_done(self, event: Any) -> bool:
        event.stream.progress()
        return event.stream.done >= event.seq

    def is_device(self, array: Any) -> bool:
        return isinstance(array, DeviceArray)

    def zeros(self, shape: Any, dtype: Any) -> Any:
        return np.zeros(shape, dtype).view(DeviceArray)

    def to_numpy(self, array: Any) -> Any:
        return np.array(array, copy=True).view(np.ndarray)

    def asarray(self, host: Any) -> Any:
        return np.array(host, copy=True, order="C").view(DeviceArray)

    def to_host_async(self, src: Any, dst: Any, stream: Any) -> None:
        self._copy(src, dst, stream)

    def to_device_async(self, src: Any, dst: Any, stream: Any) -> None:
        self._copy(src, dst, stream)

    def _copy(self, src: Any, dst: Any, stream: Any) -> None:
        s, d = memoryview(np.asarray(src)).cast("B"), memoryview(dst).cast("B")
        if s.nbytes != d.nbytes:
            raise ValueError(f"copy of {s.nbytes} bytes into a buffer of {d.nbytes}")
        stream.put(_Op([], lambda: d.__setitem__(slice(None), s), (s, d)))

    def register_host(self, buf: Any) -> Any:
        view = memoryview(buf)
        addr = np.frombuffer(view.cast("B"), np.uint8).ctypes.data if view.nbytes else 0
        if addr in self.registered:  # as cudaHostRegister: a range registered twice is refused
            raise RuntimeError("cudaErrorHostMemoryAlreadyRegistered (fake): this buffer is registered already")
        self.registered[addr] = view.nbytes
        return addr

    def unregister_host(self, handle: Any) -> None:
        if self.registered.pop(handle, None) is None:
            raise RuntimeError("cudaErrorHostMemoryNotRegistered (fake): unregister of a buffer never registered")
