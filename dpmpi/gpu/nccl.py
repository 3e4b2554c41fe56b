"""``dpmpi.gpu.NcclComm``: an NCCL communicator over the ranks of a dpmpi communicator, rebuilt
with it after every repair.

    comm = dpmpi.init()
    nc = dpmpi.gpu.NcclComm(comm)              # collective over comm; same rank numbers
    nc.Allreduce(MPI.IN_PLACE, grads)          # device arrays; polled, never hangs
    half = nc.Split(comm.Get_rank() % 2)       # derived, rebuilt too

- Bootstrap (collective over ``comm``): rank 0 makes a fresh unique id, ``comm.Bcast`` carries it,
  every rank joins with its rank in ``comm``; then a warm-up allreduce under a deadline.
- Every operation is enqueued on a stream (the caller's ``stream=``, else the current one) and
  waited for by polling (``dpmpi.gpu.poll.wait``): the work's event, the NCCL async error,
  dpmpi's failure watcher, an MPI-side probe and ``DPMPI_GPU_TIMEOUT``. A failure aborts the
  communicator (from this thread) and is raised as ``ProcFailedError``/``RevokedError``; this rank
  also revokes its probe, so the waits of its peers end too (every survivor aborts). Until the
  next repair every call raises ``ProcFailedError``.
- Repairs (the repair listener contract): ``repair_begins`` aborts the communicator and those
  split from it (main thread, before the repair's first MPI call) and revokes their probes;
  ``repair_done`` bootstraps them again over the repaired communicators, so a replacement
  takes the failed rank's number. A replacement creates its ``NcclComm`` (and its splits, in the
  same order) after it joined: the same collectives as the survivors' rebuild.
- No NCCL communicator is ever destroyed by the garbage collector (ncclCommDestroy can hang
  after a peer died): each is kept for the life of the process and released only by an abort.

Owner and lifetime: an ``NcclComm`` is used by the thread that made it (the main thread, which
also runs the repair listeners); it has no threads of its own. Its entry points are dpmpi's own
code for the failure watcher (``interrupts.uninterrupted``): never interrupted half-way (an abort
cut in the middle would leave a kernel spinning); a notice that arrives meanwhile is raised when
they return, or ends their wait (``poll``).
"""
from __future__ import annotations

import hashlib
import time
from typing import Any, Callable

from mpi4py import MPI

from dpmpi import faults
from dpmpi.interrupts import uninterrupted
from dpmpi.comm import Comm
from dpmpi.mpicall import keep_forever
from dpmpi.errors import ProcFailedError, from_mpi
from dpmpi.gpu.backend import check_array, check_pair, op_name
from dpmpi.gpu.select import get as get_backend
from dpmpi.gpu import poll, settings


class NcclComm:
    """See the module. ``comm``: a ``dpmpi.ResilientComm`` (repaired; this follows its repairs)
    or any ``dpmpi.Comm`` (never repaired)."""

    @uninterrupted
    def __init__(self, comm: Any, *, backend: Any = None, _parent: NcclComm | None = None) -> None:
        if getattr(getattr(comm, "role", None), "value", "") == "SPARE":
            raise RuntimeError("NcclComm: this process is a spare that has not been called in yet; create the "
                               "NCCL communicator after comm.Await() (or dpmpi.init() with wait=True)")
        if not hasattr(comm, "Bcast") or not hasattr(comm, "mpi"):
            raise TypeError(f"NcclComm needs a dpmpi communicator (dpmpi.init() or dpmpi.Comm), got "
                            f"{type(comm).__name__}")
        self.comm = comm
        self.backend = backend if backend is not None else get_backend()
        self.rebuilds = 0  # how many repairs rebuilt this communicator
        self.timings: dict[str, float] = {}  # ms of the last bootstrap's steps and of the last abort
        # the root's family: itself and every communicator split from it (or from those), in
        # creation order, the order in which a repair rebuilds them and a replacement makes them
        self._family: list[NcclComm] = [self] if _parent is None else _parent._family
        # the root's Split calls, in order, on this process: (parent, color, key, child or None);
        # a repair replays them (collective over each parent), as a replacement makes them anew
        self._splits: list[list] = [] if _parent is None else _parent._splits
        self._raw: Any = None
        self._probe: poll.Probe | None = None
        self._aborted = True
        self._closed = False
        self._build()
        # the root follows the repairs of its communicator (held weakly there; it rebuilds the
        # family); a plain dpmpi.Comm is never repaired
        self._listening = _parent is None and hasattr(comm, "add_repair_listener")
        if self._listening:
            comm.add_repair_listener(self)

    # -- state --
    @property
    def rank(self) -> int:
        return self._raw.rank

    @property
    def size(self) -> int:
        return self._raw.size

    def Get_rank(self) -> int:
        return self._raw.rank

    def Get_size(self) -> int:
        return self._raw.size

    @property
    def aborted(self) -> bool:
        """True after a failure until the next repair rebuilds it."""
        return self._aborted

    def __repr__(self) -> str:
        state = "closed" if self._closed else "aborted" if self._aborted else f"rank {self.rank} of {self.size}"
        return f"<dpmpi.gpu.NcclComm {state}, {self.backend.name} backend>"

    # -- bootstrap, abort, rebuild --
    def _build(self) -> None:
        """Collective over ``self.comm``: fresh unique id from rank 0, init, warm-up."""
        rank, size = self.comm.Get_rank(), self.comm.Get_size()
        uid = bytearray(128)
        if rank == 0:
            uid[:] = self.backend.unique_id()
        t0 = time.perf_counter()
        try:  # (on the raw communicator: dpmpi's own collective, never answered from a replacement's
            # prologue record, dpmpi.resilient.prologue); a death here fails the bootstrap (or the repair)
            self.comm.mpi.Bcast(uid, root=0)
        except MPI.Exception as exc:
            raise from_mpi(exc, self.comm.mpi, "NcclComm (bootstrap)") from exc
        self.uid_digest = hashlib.sha256(uid).hexdigest()[:16]  # (tests: a fresh id every time)
        self._probe = poll.Probe(self.comm)
        faults.point("nccl-init")
        t1 = time.perf_counter()
        with poll.bounded(settings.rebuild_timeout(), "ncclCommInitRank"):
            raw = self.backend.init(size, bytes(uid), rank, self.comm.mpi)
        t2 = time.perf_counter()
        keep_forever(raw)  # never destroyed by the garbage collector
        self._raw, self._aborted = raw, False
        one = self.backend.zeros((1,), "int32")
        one.fill(1)
        self._run("warm-up", lambda r, s: r.allreduce(one, one, "sum", s), None, settings.rebuild_timeout())
        got = int(self.backend.to_numpy(one)[0])  # (its event completed: nothing left to wait for)
        t3 = time.perf_counter()
        self.timings.update(bootstrap_ms=1e3 * (t1 - t0), init_ms=1e3 * (t2 - t1), warmup_ms=1e3 * (t3 - t2))
        if got != size:
            raise RuntimeError(f"NcclComm warm-up: allreduce of 1 over {size} ranks gave {got}")

    def _abort(self, tell: bool = True) -> None:
        """Abort (local; bounded: a hung abort ends the process); ``tell``: revoke the probe, so
        that the peers' waits end too (a failure; not a close, where peers may still finish)."""
        if not self._aborted and self._raw is not None:
            self._aborted = True
            t0 = time.perf_counter()
            with poll.bounded(settings.rebuild_timeout(), "ncclCommAbort"):
                self._raw.abort()
            self.timings["abort_ms"] = 1e3 * (time.perf_counter() - t0)
        if tell and self._probe is not None:
            self._probe.revoke()

    def repair_begins(self) -> None:
        """Listener: a repair starts on this process (main thread). Never raises."""
        for nc in self._family:
            try:
                nc._abort()
            except Exception:  # noqa: BLE001 (the contract: must not raise; the rebuild starts afresh)
                nc._aborted = True

    def repair_done(self, event: Any) -> None:
        """Listener: the repair committed; bootstrap again over the repaired communicators
        (collective; a failure here propagates out of comm.Respawn(), which the caller repeats)."""
        if self._closed or event.rank < 0:
            return
        self.repair_begins()  # (a no-op normally: every attempt of the repair called it)
        self._build()
        self.rebuilds += 1
        for split in self._splits:  # the same collectives, in the same order, as a replacement's
            parent, color, key, child = split
            if parent._closed:
                continue
            child_comm = self._split_mpi(parent, color, key)
            if child is not None:
                child.comm = child_comm
                child._build()
                child.rebuilds += 1

    @uninterrupted
    def Split(self, color: int = 0, key: int = 0) -> NcclComm | None:
        """A derived NCCL communicator of the ranks with the same ``color`` (ordered by ``key``;
        ``MPI.UNDEFINED``: none, returns None). Collective; rebuilt with this one after repairs.
        Made over an MPI split of this one's communicator with its own bootstrap (never
        ncclCommSplit on a communicator that may have lost a peer); a repair splits again."""
        self._usable("Split")
        if color != MPI.UNDEFINED and (isinstance(color, bool) or not isinstance(color, int) or color < 0):
            raise ValueError(f"NcclComm.Split: color must be an int >= 0 or MPI.UNDEFINED, got {color!r}")
        if isinstance(key, bool) or not isinstance(key, int):
            raise TypeError(f"NcclComm.Split: key must be an int, got {key!r}")
        child_comm = self._split_mpi(self, color, key)
        child = None
        if child_comm != MPI.COMM_NULL:
            child = NcclComm(child_comm, backend=self.backend, _parent=self)
            self._family.append(child)
        self._splits.append([self, color, key, child])
        return child

    @staticmethod
    def _split_mpi(parent: NcclComm, color: int, key: int) -> Any:
        """The MPI side of a split: a plain dpmpi communicator (warmed up), not one the repairs
        track, so that survivors and a replacement make the same calls. Kept for the life of
        the process (freeing one that lost a process is not safe)."""
        made = Comm(parent.comm.mpi).Split(color, key)
        keep_forever(made)
        return made

    @uninterrupted
    def close(self) -> None:
        """Abort this communicator (on the root: and those split from it) and stop following
        repairs (local)."""
        if self._closed:
            return
        for nc in self._family if self._family[0] is self else [self]:
            nc._abort(tell=False)
            nc._closed = True
        if self._listening:
            self.comm.remove_repair_listener(self)

    # -- operations --
    def _usable(self, what: str) -> Any:
        if self._closed:
            raise ValueError(f"NcclComm.{what}: the communicator is closed")
        if self._aborted:
            raise ProcFailedError(f"NcclComm.{what}: the NCCL communicator was aborted after a failure; repair "
                                  f"(comm.Respawn(), or the Runtime does it): that rebuilds it", MPI.ERR_PROC_FAILED)
        return self._raw

    def _run(self, what: str, enqueue: Callable[[Any, Any], None], stream: Any, seconds: float | None = None) -> None:
        raw = self._usable(what)
        faults.point(f"nccl-{what}")
        s = self.backend.stream(stream)
        try:
            enqueue(raw, s)
            faults.point(f"nccl-{what}-enqueued")  # (tests: a rank dies inside the collective)
            event = self.backend.record(s)
            poll.wait(self.backend, event, raw, self._probe, seconds or settings.op_timeout(), f"NcclComm.{what}")
        except BaseException:
            self._abort()  # this thread issues the NCCL calls: it aborts (every survivor's wait ends here)
            raise

    @uninterrupted
    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: Any = "sum", *, stream: Any = None) -> None:
        send, recv = check_pair(self.backend, "Allreduce", sendbuf, recvbuf, (1, 1), self.size)
        name = op_name(op)
        self._run("Allreduce", lambda r, s: r.allreduce(send, recv, name, s), stream)

    @uninterrupted
    def Bcast(self, buf: Any, root: int = 0, *, stream: Any = None) -> None:
        b = check_array(self.backend, "Bcast", "buf", buf)
        self._root("Bcast", root)
        self._run("Bcast", lambda r, s: r.bcast(b, root, s), stream)

    @uninterrupted
    def Reduce(self, sendbuf: Any, recvbuf: Any, op: Any = "sum", root: int = 0, *, stream: Any = None) -> None:
        self._root("Reduce", root)
        if self.rank == root or recvbuf is not None:
            send, recv = check_pair(self.backend, "Reduce", sendbuf, recvbuf, (1, 1), self.size)
        else:  # mpi4py's convention: recvbuf only matters at the root
            send = recv = check_array(self.backend, "Reduce", "sendbuf", sendbuf)
        name = op_name(op)
        self._run("Reduce", lambda r, s: r.reduce(send, recv, name, root, s), stream)

    @uninterrupted
    def Allgather(self, sendbuf: Any, recvbuf: Any, *, stream: Any = None) -> None:
        send, recv = check_pair(self.backend, "Allgather", sendbuf, recvbuf, (self.size, 1), self.size)
        if sendbuf is MPI.IN_PLACE:
            raise ValueError("NcclComm.Allgather: MPI.IN_PLACE is not supported; pass this rank's part as sendbuf")
        self._run("Allgather", lambda r, s: r.allgather(send, recv, s), stream)

    @uninterrupted
    def Reduce_scatter(self, sendbuf: Any, recvbuf: Any, op: Any = "sum", *, stream: Any = None) -> None:
        """Reduce_scatter_block: every rank gets ``recvbuf.size`` elements of the reduction."""
        send, recv = check_pair(self.backend, "Reduce_scatter", sendbuf, recvbuf, (1, self.size), self.size)
        if sendbuf is MPI.IN_PLACE:
            raise ValueError("NcclComm.Reduce_scatter: MPI.IN_PLACE is not supported")
        name = op_name(op)
        self._run("Reduce_scatter", lambda r, s: r.reduce_scatter(send, recv, name, s), stream)

    @uninterrupted
    def Send(self, buf: Any, dest: int, *, stream: Any = None) -> None:
        b = check_array(self.backend, "Send", "buf", buf)
        self._root("Send", dest)
        self._run("Send", lambda r, s: r.send(b, dest, s), stream)

    @uninterrupted
    def Recv(self, buf: Any, source: int, *, stream: Any = None) -> None:
        b = check_array(self.backend, "Recv", "buf", buf)
        self._root("Recv", source)
        self._run("Recv", lambda r, s: r.recv(b, source, s), stream)

    def _root(self, what: str, rank: Any) -> None:
        self._usable(what)
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < self.size:
            raise ValueError(f"NcclComm.{what}: rank {rank!r} is not in 0..{self.size - 1}")
