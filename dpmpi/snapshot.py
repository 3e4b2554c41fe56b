"""``dpmpi.Snapshot``: in-memory, double-buffered snapshots with buddy replication.

A snapshot keeps, on every rank, the last committed copy of that rank's registered arrays in
memory that dpmpi owns (page-aligned, locked with ``mlock`` when the process may), plus copies of
its buddies' (by default its ring neighbour on the communicator), so that a rank that dies can
be restored on its replacement without touching a disk::

    snap = dpmpi.Snapshot(comm, {"w": w, "m": m})    # local: registers the arrays
    for step in range(start, n):
        ...compute...                                  # may read w and m
        snap.commit(step - 1) if step > start else None  # collective: seal the staged copy
        w -= lr * g                                    # modify the state
        snap.stage()                                   # local: copying starts, returns at once
    epoch = snap.restore()                             # collective: after comm.Respawn()

Which calls communicate:

- ``Snapshot(...)``, ``stage()``, ``wait()``, ``close()``, ``epoch`` are local.
- ``commit(epoch)`` is collective over ``comm``: every rank commits the same epoch (the first
  commit also creates dpmpi's own communicator for snapshot traffic).
- ``restore()`` and ``Snapshot.load()`` are collective over ``comm``.

How the pieces fit (the C side is ``cext/dpmpi_snap.c``):

- Two slots per rank. ``stage()`` writes the slot that does not hold the newest committed
  epoch, on C copy threads with the GIL released, checksumming as it copies; ``commit`` waits
  for the copy and seals the slot (epoch, length, checksum). A failure or an error in the middle
  of a copy leaves the committed slot untouched.
- After a commit, a C thread sends the slot to the buddies and receives theirs (non-blocking
  MPI, polled with short sleeps), then a barrier of its own point-to-point messages. The next copy waits for that
  barrier before it overwrites the older slot: an epoch's predecessor is dropped only when the
  epoch is held by every rank and every buddy, so some epoch is always restorable.
- ``restore()`` agrees on the newest epoch whose copy survives for every rank, sends the copies
  that replacements need, verifies checksums, and writes the arrays back.
"""
from __future__ import annotations

import atexit
import functools
import json
import os
import queue
import threading
import time
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Mapping

from mpi4py import MPI

from dpmpi import _guard
from dpmpi import config
from dpmpi.interrupts import uninterrupted
from dpmpi.comm import Comm
from dpmpi.mpicall import cause_of, keep_forever, keep_pending, warm_up as _warm_up
from dpmpi.resilient import Role
from dpmpi.errors import PEER_FAILURE_CLASSES, DpmpiError, ProcFailedError, from_mpi

ENV_THREADS = "DPMPI_COPY_THREADS"
_ALIGN = 64  # arrays start at 64-byte offsets in a slot (the copy kernel streams 32-byte stores)
_TAG_HDR, _TAG_DATA = 7_101, 7_102
_CHUNK = 1 << 30
_INJECTED, _GATE_FAILED = 1, 2  # cext/dpmpi_c.h: DPMPI_ENGINE_INJECTED, DPMPI_ENGINE_GATE_FAILED
_ABANDONED = 100000  # cext/dpmpi_c.h: DPMPI_REPL_ABANDONED
_FILE_MAGIC = "dpmpi-snapshot-1"


class SnapshotLostError(DpmpiError):
    """No epoch survives for every rank: a rank and every holder of its copies failed together.
    ``ranks`` lists the logical ranks whose state is lost (``failed_ranks``, inherited, stays
    empty: the lost ranks are not necessarily the processes that failed)."""

    def __init__(self, message: str, ierr: int = MPI.ERR_OTHER, ranks: tuple[int, ...] = ()):
        super().__init__(message, ierr)
        self.ranks = tuple(ranks)

    def __reduce__(self):  # type: ignore[override]
        return (type(self), (self.message, self.Get_error_code(), self.ranks))


class SnapshotCopyError(DpmpiError):
    """A staging copy did not complete; the committed snapshot is unchanged."""


@functools.cache
def _cext() -> Any:
    from dpmpi import _cext

    # the engine's settings, validated here (the C code reads no environment)
    _cext.lib.dpmpi_snap_configure(config.get("DPMPI_SNAPSHOT_NICE"), int(not config.get("DPMPI_NO_SIMD")))
    return _cext


# ---- layout -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Entry:
    name: str
    format: str
    shape: tuple[int, ...]
    nbytes: int
    offset: int


def _view(name: str, obj: Any) -> memoryview:
    try:
        view = memoryview(obj)
    except TypeError:
        raise TypeError(
            f"snapshot array {name!r} is a {type(obj).__name__}, which does not expose the buffer protocol; "
            f"register a numpy array (or a bytearray, array.array, ...)") from None
    if not view.c_contiguous:
        raise ValueError(f"snapshot array {name!r} is not C-contiguous; register numpy.ascontiguousarray(...) "
                         f"and keep using that array")
    if view.readonly:
        raise ValueError(f"snapshot array {name!r} is read-only; restore() must write it back. Register a "
                         f"writable array (numpy: arr.flags.writeable must be True)")
    return view


def _layout(arrays: Mapping[str, Any]) -> tuple[_Entry, ...]:
    entries, offset = [], 0
    for name, obj in arrays.items():
        view = _view(name, obj)
        entries.append(_Entry(name, view.format, tuple(view.shape), view.nbytes, offset))
        offset += (view.nbytes + _ALIGN - 1) // _ALIGN * _ALIGN
    return tuple(entries)


def _signature(entries: tuple[_Entry, ...]) -> list:
    return [[e.name, e.format, list(e.shape), e.nbytes] for e in entries]


def _total(entries: tuple[_Entry, ...]) -> int:
    return max([e.offset + e.nbytes for e in entries], default=0)


# ---- memory -----------------------------------------------------------------------------------
_LOCK_WARNED = False
_OPEN: weakref.WeakSet = weakref.WeakSet()  # Snapshots not closed yet


def _close_open_snapshots() -> None:
    """At interpreter exit, before MPI ends and before Python frees the snapshot memory: close
    every Snapshot the program did not close, so that no replication request is left pending on
    memory that is about to be freed (seen: a segfault in MPI's progress at exit)."""
    for snap in list(_OPEN):
        try:
            snap.close()
        except BaseException:  # a peer failed during the last replication: keep its memory
            snap._leak()


atexit.register(_close_open_snapshots)


class _Slot:
    """One copy of one rank's state in memory owned by dpmpi (``epoch`` -1: holds nothing)."""

    def __init__(self, nbytes: int, lock: bool) -> None:
        global _LOCK_WARNED
        ext = _cext()
        locked, err = ext.ffi.new("int *"), ext.ffi.new("int *")
        size = max(nbytes, 1)
        ptr = ext.lib.dpmpi_mem_alloc(size, int(lock), locked, err)
        if ptr == ext.ffi.NULL:
            raise MemoryError(f"dpmpi: cannot map {size} bytes for a snapshot slot ({os.strerror(err[0])})")
        self.locked = bool(locked[0])
        self.ptr = ext.ffi.gc(ext.ffi.cast("char *", ptr),
                              lambda p, n=size, k=int(self.locked): ext.lib.dpmpi_mem_free(p, n, k))
        self.nbytes = nbytes
        self.epoch = -1
        self.digest = 0
        self.hdr = ext.ffi.new("uint64_t[4]")  # epoch, nbytes, digest, owner: what a replica arrives with
        if lock and not self.locked and not _LOCK_WARNED:
            _LOCK_WARNED = True
            warnings.warn(
                f"dpmpi: snapshot memory is not locked (mlock: {os.strerror(err[0])}); it works, but the OS may "
                f"page it out. Raise the limit (ulimit -l, or CAP_IPC_LOCK), or pass lock_memory=False to "
                f"silence this.", ResourceWarning, stacklevel=4)

    def buffer(self, start: int = 0, stop: int | None = None) -> memoryview:
        stop = self.nbytes if stop is None else stop
        return memoryview(_cext().ffi.buffer(self.ptr, max(self.nbytes, 1)))[start:stop]


def _segments(entries: tuple[_Entry, ...], base: Any) -> tuple[list, list]:
    ptrs = [base + e.offset for e in entries]
    return ptrs, [e.nbytes for e in entries]


def _prefault(ptrs: list, views: list[memoryview]) -> None:
    """Fault the arrays' pages in, contents unchanged (arrays made by np.zeros and never written
    have no pages yet; copying into them ran at ~0.1 GB/s here)."""
    ext = _cext()
    for ptr, view in zip(ptrs, views):
        ext.lib.dpmpi_prefault(ptr, view.nbytes)  # an error (old kernel): the copy faults them


class _Engine:
    """The C copy threads: one job at a time."""

    def __init__(self, threads: int) -> None:
        ext = _cext()
        raw = ext.lib.dpmpi_engine_new(threads)
        if raw == ext.ffi.NULL:
            raise RuntimeError(f"dpmpi: cannot start {threads} snapshot copy thread(s)")
        self.raw = ext.ffi.gc(raw, ext.lib.dpmpi_engine_free)
        self._keep: list = []

    def start(self, dst: list | None, src: list, lens: list[int], gate: Any = None) -> None:
        ext = _cext()
        n = len(src)
        d = ext.ffi.new("char *[]", [ext.ffi.cast("char *", p) for p in dst]) if dst is not None else ext.ffi.NULL
        s = ext.ffi.new("char *[]", [ext.ffi.cast("char *", p) for p in src])
        ln = ext.ffi.new("size_t[]", lens)
        self._keep = [d, s, ln, dst, src]  # alive until the job ends
        rc = ext.lib.dpmpi_engine_start(self.raw, n, d, s, ln, 0, gate if gate is not None else ext.ffi.NULL)
        if rc != 0:
            raise RuntimeError(f"dpmpi: the snapshot copy engine refused a job (code {rc})")

    def wait(self) -> tuple[int, int]:
        ext = _cext()
        digest = ext.ffi.new("uint64_t *")
        rc = ext.lib.dpmpi_engine_wait(self.raw, digest)  # cffi releases the GIL
        self._keep = []
        return rc, int(digest[0])

    def checksum(self, src: list, lens: list[int]) -> int:
        self.start(None, src, lens)
        return self.wait()[1]


_MPI_BOUND = False


def _bind_mpi() -> None:
    global _MPI_BOUND
    if _MPI_BOUND:
        return
    path = _guard.libmpi_path()
    if path is None or _cext().lib.dpmpi_mpi_bind(path.encode()) != 0:
        raise RuntimeError("dpmpi: cannot find the MPI library's functions for snapshot replication "
                           f"(libmpi: {path}); dpmpi supports Open MPI 5")
    _MPI_BOUND = True


class _Replicator:
    """The C replication thread."""

    def __init__(self) -> None:
        ext = _cext()
        raw = ext.lib.dpmpi_repl_new()
        if raw == ext.ffi.NULL:
            raise RuntimeError("dpmpi: cannot start the snapshot replication thread")
        self.raw = raw
        self.running = False
        self.error = 0  # MPI error class of the last job's failure
        self.ops: list[tuple[str, Any]] = []  # what each op of the running job was, for collect()
        self._keep: list = []

    def start(self, comm: MPI.Comm, ops: list[tuple[int, int, int, Any, int]], meaning: list, barrier: bool) -> None:
        ext = _cext()
        cops = ext.ffi.new("dpmpi_op[]", max(len(ops), 1))
        for i, (peer, tag, send, buf, n) in enumerate(ops):
            cops[i].peer, cops[i].tag, cops[i].send, cops[i].buf, cops[i].len = peer, tag, send, buf, n
        self._keep = [cops, ops]
        rc = ext.lib.dpmpi_repl_start(self.raw, ext.ffi.cast("void *", MPI._handleof(comm)),
                                      ext.ffi.cast("void *", MPI._handleof(MPI.BYTE)), len(ops), cops, int(barrier))
        if rc != 0:
            raise RuntimeError(f"dpmpi: the snapshot replication thread refused a job (code {rc})")
        self.ops = meaning
        self.running = True

    def wait(self, timeout: float = -1.0) -> int:
        """0 done, 1 still running, < 0: -(MPI error class). Without a timeout the calling thread
        drives MPI's progress while it waits: call it only from the program's thread."""
        lib = _cext().lib
        rc = lib.dpmpi_repl_wait_progress(self.raw) if timeout < 0 else lib.dpmpi_repl_wait(self.raw, timeout)
        if rc != 1:
            self.running = False
            self.error = -rc if rc < 0 else 0
        return rc

    def op_ok(self, i: int) -> bool:
        return _cext().lib.dpmpi_repl_op_state(self.raw, i) == 1

    def close(self, timeout: float) -> bool:
        ok = _cext().lib.dpmpi_repl_free(self.raw, timeout) == 0
        self.raw = None
        return ok


# ---- the snapshot -----------------------------------------------------------------------------
def _int_arg(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _threads_from(value: int | None) -> int:
    if value is None:
        value = config.get(ENV_THREADS)
    value = _int_arg("threads", value, 1)
    if value > 64:
        raise ValueError(f"threads={value}: at most 64 copy threads")
    return value


class Snapshot:
    """In-memory snapshots of a rank's arrays, double-buffered and replicated to buddies.

    ``arrays`` maps names to C-contiguous writable buffers (numpy arrays, bytearrays, ...); each
    rank registers its own (names, shapes and dtypes may differ between ranks). ``replicas`` other
    ranks hold a copy of each rank's committed snapshot (default 1, its ring neighbour; 0 keeps
    only the local copy). ``threads`` copy threads (default ``DPMPI_COPY_THREADS`` or 1).
    ``persist_dir``/``persist_every``: also write every K-th committed epoch to disk in the
    background (one file per rank), the fallback when in-memory copies are lost."""

    def __init__(self, comm: Any, arrays: Mapping[str, Any], *, replicas: int = 1, threads: int | None = None,
                 persist_dir: str | os.PathLike | None = None, persist_every: int = 0,
                 lock_memory: bool = True) -> None:
        if isinstance(comm, Comm):
            self._comm = comm
        elif isinstance(comm, MPI.Intracomm) and comm != MPI.COMM_NULL:
            self._comm = Comm(comm)
        else:
            raise TypeError(f"Snapshot needs a dpmpi.Comm or an mpi4py Intracomm, got {type(comm).__name__}")
        if not isinstance(arrays, Mapping) or not arrays:
            raise TypeError("Snapshot needs a non-empty dict of arrays, e.g. {'w': w, 'm': m}")
        for name in arrays:
            if not isinstance(name, str):
                raise TypeError(f"snapshot array names must be str, got {name!r}")
        self._arrays = dict(arrays)
        from dpmpi.gpu import devsnap  # GPU: device arrays are registered through pinned host mirrors
        self._device = devsnap.mirrors(self._arrays)  # GPU (None: no device arrays)
        self._entries = _layout(self._arrays)
        self._nbytes = _total(self._entries)
        _prefault(*self._sources())  # now, off the critical path: a restore writes into these pages
        waiting = getattr(self._comm, "role", None) is Role.SPARE
        size = self._comm.active_size if waiting else self._comm.Get_size()
        self._replicas = _int_arg("replicas", replicas, 0)
        if self._replicas > size - 1:
            if replicas == 1 and size == 1:
                self._replicas = 0  # the default on a single rank: nowhere to replicate to
            else:
                raise ValueError(f"replicas={replicas} on a communicator of size {size}: at most {size - 1}")
        self._threads = _threads_from(threads)
        self._persist_every = _int_arg("persist_every", persist_every, 0)
        self._persist_dir = None if persist_dir is None else os.fspath(persist_dir)
        if self._persist_every and self._persist_dir is None:
            raise ValueError("persist_every needs persist_dir (the directory for the snapshot files)")
        if self._persist_dir is not None:
            os.makedirs(self._persist_dir, exist_ok=True)
            if not self._persist_every:
                self._persist_every = 1
        self._lock = bool(lock_memory)
        self._engine = _Engine(self._threads)
        self._own = [_Slot(self._nbytes, self._lock), _Slot(self._nbytes, self._lock)]
        # a waiting spare also prepares the replica slots it will need if its layout is the common
        # one, so that taking over allocates nothing
        self._pool = [_Slot(self._nbytes, self._lock) for _ in range(2 * self._replicas)] if waiting else []
        self._committed = -1  # index of the own slot with the newest committed epoch
        self._staging: int | None = None
        self._epoch = -1
        self._repl: _Replicator | None = None
        self._scomm: MPI.Intracomm | None = None  # dpmpi's communicator for snapshot traffic
        self._layouts: dict[int, list] = {}  # logical rank -> its layout signature
        self._held: dict[int, list[_Slot]] = {}  # owner's logical rank -> two replica slots
        self._writer: threading.Thread | None = None
        self._writer_slot: _Slot | None = None
        self._writer_error: BaseException | None = None
        self._closed = False
        self._auto: tuple[int, threading.Event] | None = None  # a background commit (stage(epoch))
        self._committer: threading.Thread | None = None  # runs the background commits
        self._commits: queue.SimpleQueue | None = None
        self._auto_error: BaseException | None = None
        self._mpi_lock = threading.Lock()  # a repair's interruption vs a background commit's replication
        self._interrupted = False  # a repair began on this process; cleared by restore()
        self._renumbers: list[dict[int, int]] = []  # renumberings of the repairs since the last restore
        self._unstaged: tuple[_Slot, int, int] | None = None  # (slot, epoch, digest) before the last stage
        self._last_rc = 0  # the last copy job's result
        self.stats: dict[str, float] = {"stage_ms": 0.0, "commit_wait_ms": 0.0, "bytes": float(self._nbytes)}
        self.last_restore: dict[str, Any] = {}
        _OPEN.add(self)

    # -- properties --
    @property
    def epoch(self) -> int:
        """The newest epoch committed on this rank (-1: none)."""
        return self._epoch

    @property
    def nbytes(self) -> int:
        return self._nbytes

    @property
    def locked(self) -> bool:
        """Whether this rank's snapshot memory is locked in RAM."""
        return all(s.locked for s in self._own)

    # -- local calls --
    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("this Snapshot is closed")

    def _sources(self) -> tuple[list, list[memoryview]]:
        """Pointers to the registered arrays, checked against the registration."""
        ext = _cext()
        views, ptrs = [], []
        for entry in self._entries:
            view = _view(entry.name, self._arrays[entry.name])
            if view.format != entry.format or tuple(view.shape) != entry.shape:
                raise ValueError(
                    f"snapshot array {entry.name!r} changed since registration: it was {entry.format} "
                    f"{entry.shape}, it is {view.format} {tuple(view.shape)}. Update arrays in place "
                    f"(w[...] = ...), or make a new Snapshot")
            views.append(view)
            ptrs.append(ext.ffi.from_buffer(view))
        return ptrs, views

    @uninterrupted
    def stage(self, epoch: int | None = None) -> None:
        """Start copying the registered arrays into the free slot; returns at once (local).

        The arrays must not be modified until ``commit()``; reading them is fine. With ``epoch``,
        the copy is committed as that epoch in the background as soon as it is done (sealed and
        replicated without waiting for the program to call ``commit``), so that a failure soon
        after loses less; ``commit(epoch)`` then waits for that. Every rank must then stage the
        same epochs (the first such call is collective: it sets up replication)."""
        self._check_open()
        if self._staging is not None or self._auto is not None:
            raise ValueError("stage() was already called; call commit(epoch) before staging again")
        if epoch is not None:
            epoch = self._check_epoch(epoch)
            if self._replicas and self._scomm is None:
                self._setup()
        t0 = time.perf_counter()
        if self._device is not None:  # GPU: device -> mirrors first (polled event), then the slot
            self._device.stage()
        src, _views = self._sources()
        target = 1 - self._committed if self._committed >= 0 else 0
        slot = self._own[target]
        if self._writer_slot is slot:
            self._join_writer()
        # the slot's epoch stays restorable until the copy starts writing (it may wait for the
        # previous epoch's replication): remember it, in case that never happens
        self._unstaged = (slot, slot.epoch, slot.digest)
        slot.epoch = -1
        dst, lens = _segments(self._entries, slot.ptr)
        gate = self._repl.raw if self._repl is not None and self._repl.running else None
        self._engine.start(dst, src, lens, gate)
        self._staging = target
        self.stats["stage_ms"] = 1e3 * (time.perf_counter() - t0)
        if epoch is not None:
            if self._committer is None:  # one thread for the Snapshot's life: starting one per
                # stage cost ~1.8 ms here (Thread.start waits until the new thread runs)
                self._commits = queue.SimpleQueue()
                self._committer = threading.Thread(target=self._auto_commits, name="dpmpi-commit", daemon=True)
                self._committer.start()
            done = threading.Event()
            self._auto = (epoch, done)
            self._commits.put((epoch, done))

    def _auto_commits(self) -> None:
        while True:
            item = self._commits.get()
            if item is None:
                return
            epoch, done = item
            try:
                self._commit_now(epoch)
            except BaseException as exc:  # given to the program by commit()
                self._auto_error = exc
            finally:
                done.set()

    def _join_auto(self) -> tuple[int, BaseException | None] | None:
        """Wait for a background commit; (its epoch, its error) or None if there was none."""
        if self._auto is None:
            return None
        epoch, done = self._auto
        done.wait()
        self._auto, error, self._auto_error = None, self._auto_error, None
        return epoch, error

    def busy(self) -> bool:
        """Whether a staging copy or a replication is still running (local, does not block)."""
        if self._closed:
            return False
        if _cext().lib.dpmpi_engine_busy(self._engine.raw):
            return True
        return self._repl is not None and self._repl.running and self._repl.wait(0.0) == 1

    @uninterrupted
    def wait(self) -> None:
        """Wait until the last commit's replication and file write are done (local). Raises
        ProcFailedError if a peer failed during the replication."""
        joined = self._join_auto()
        if joined is not None and joined[1] is not None:
            raise joined[1]
        self._join_writer()
        if self._repl is not None and self._repl.running:
            if self._repl.wait() < 0:
                self._raise_peer_failure("snapshot replication")
            self._collect()

    @uninterrupted
    def close(self) -> None:
        """Stop the threads and free the memory (local). Later calls raise ValueError."""
        if self._closed:
            return
        self._join_auto()
        if self._committer is not None:
            self._commits.put(None)
            self._committer.join()
            self._committer = None
        self._engine.wait()
        self._join_writer()
        # the peers finish the same epoch's replication; waiting lets theirs complete too
        self._stop_replication(revoke=True, grace=30.0)
        if self._repl is not None:
            interrupted = self._repl.error != 0  # abandoned or failed: requests may still be pending
            if not self._repl.close(1.0) or interrupted:
                self._leak()
            self._repl = None
        self._free_scomm()
        if self._device is not None:  # GPU: unregister the pinned mirrors
            self._device.close()
        self._closed = True
        _OPEN.discard(self)

    def _leak(self) -> None:
        """Keep this Snapshot's memory and threads for the life of the process: MPI may still
        complete a request on them (a replication that a failure interrupted)."""
        keep_forever((self._own, dict(self._held), list(self._pool), self._repl, self._engine))

    def __del__(self) -> None:
        # A Snapshot dropped without close(): nothing it owns may be freed while a copy or a
        # replication may still use it (the interpreter's exit closes open ones first).
        if getattr(self, "_closed", True):
            return
        try:
            busy = self._committer is not None or _cext().lib.dpmpi_engine_busy(self._engine.raw) or (
                self._repl is not None and self._repl.running)
            if busy:
                self._leak()
        except Exception:
            pass

    def _inject_copy_failure(self, after_bytes: int) -> None:
        """Test hook: the next staging copy stops (half-writing a unit) after ``after_bytes``."""
        _cext().lib.dpmpi_engine_fail_after(self._engine.raw, after_bytes)

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- commit --
    def _check_epoch(self, epoch: Any) -> int:
        epoch = _int_arg("epoch", epoch, 0)
        if epoch <= self._epoch:
            raise ValueError(f"commit({epoch}): epochs must grow; the last committed epoch is {self._epoch}")
        return epoch

    @uninterrupted
    def commit(self, epoch: int, *, durable: bool = True) -> None:
        """Seal the staged copy as ``epoch`` and replicate it to the buddies.

        Collective over the communicator: every rank commits the same epoch, larger than the
        last. Blocking. With ``durable=True`` (the default) it returns when ``epoch`` is
        restorable for every rank: sealed here and held by this rank's buddies, and the same on
        every other rank (the replication ends with a barrier); a failure of any rank after that
        restores ``epoch`` or a later one. With ``durable=False`` it returns once the copy is
        sealed locally; the replication continues in the background (``wait()`` waits for it), so a
        failure before it ends may restore the previous epoch. After ``stage(epoch)``, waits for
        the background commit of that epoch (then, if durable, for its replication)."""
        self._check_open()
        t0 = time.perf_counter()
        if self._auto is not None:
            auto_epoch, error = self._join_auto()
            if epoch != auto_epoch:
                raise ValueError(f"commit({epoch}) after stage(epoch={auto_epoch}): the epochs must be the same")
            if error is not None:
                raise error
        else:
            epoch = self._check_epoch(epoch)
            if self._staging is None:
                raise ValueError("commit() without stage(): call snap.stage() after updating the arrays")
            self._commit_now(epoch)
        if durable:
            self.wait()
        self.stats["commit_wait_ms"] = 1e3 * (time.perf_counter() - t0)

    def _commit_now(self, epoch: int) -> None:
        t0 = time.perf_counter()
        target, self._staging = self._staging, None
        rc, digest = self._engine.wait()
        self._last_rc = rc
        self.stats["commit_wait_ms"] = 1e3 * (time.perf_counter() - t0)
        if rc == _GATE_FAILED:
            self._raise_peer_failure("snapshot replication of the previous epoch")
        if rc == _INJECTED:
            raise SnapshotCopyError(f"the staging copy for epoch {epoch} was stopped half-way (test hook); "
                                    f"the committed epoch {self._epoch} is intact")
        if rc != 0:
            raise SnapshotCopyError(f"the staging copy for epoch {epoch} failed (code {rc})")
        self._collect()
        slot = self._own[target]
        slot.epoch, slot.digest = epoch, digest
        self._unstaged = None
        self._committed, self._epoch = target, epoch
        if self._replicas:
            with self._mpi_lock:  # not while a repair is under way on this process
                if self._interrupted:
                    raise ProcFailedError(f"snapshot replication of epoch {epoch} not started: a repair is under "
                                          f"way; call snap.restore() after it", MPI.ERR_PROC_FAILED)
                self._replicate(epoch)
        if self._persist_dir is not None and epoch % self._persist_every == 0:
            self._persist(slot)

    def _raise_peer_failure(self, what: str) -> None:
        cls = MPI.ERR_PROC_FAILED
        if self._repl is not None:
            self._repl.wait(0.0)
            cls = self._repl.error or cls
        if cls == _ABANDONED:  # a repair on this process stopped it
            raise ProcFailedError(f"{what} was stopped by a repair on this process; call snap.restore() after it",
                                  MPI.ERR_PROC_FAILED)
        if cls not in PEER_FAILURE_CLASSES:
            raise DpmpiError(f"MPI error class {cls} during {what}", cls)
        raise ProcFailedError(
            f"a peer process failed during {what} (MPI error class {cls}). Repair the communicator "
            f"(comm.Respawn()), then call snap.restore().", cls)

    def _setup(self) -> None:
        """dpmpi's communicator for snapshot traffic and every rank's layout (collective)."""
        self._setup_comm_only("Snapshot setup")
        scomm = self._scomm
        try:
            layouts = scomm.allgather(_signature(self._entries))
        except MPI.Exception as exc:
            raise from_mpi(exc, scomm, "Snapshot setup") from exc
        self._layouts = dict(enumerate(layouts))
        self._make_replica_slots()

    def _make_replica_slots(self) -> None:
        rank, size = self._scomm.Get_rank(), self._scomm.Get_size()
        held: dict[int, list[_Slot]] = {}
        for d in range(1, self._replicas + 1):
            owner = (rank - d) % size
            nbytes = _total(self._owner_entries(owner))  # exactly the owner's slot size
            old = self._held.get(owner)
            if old is not None and old[0].nbytes == nbytes:
                held[owner] = old
            elif len(self._pool) >= 2 and self._pool[0].nbytes == nbytes:
                held[owner] = [self._pool.pop(), self._pool.pop()]
            else:
                held[owner] = [_Slot(nbytes, self._lock), _Slot(nbytes, self._lock)]
        self._pool = []
        self._held = held

    def _owner_entries(self, owner: int) -> tuple[_Entry, ...]:
        entries, offset = [], 0
        for name, fmt, shape, nbytes in self._layouts[owner]:
            entries.append(_Entry(name, fmt, tuple(shape), nbytes, offset))
            offset += (nbytes + _ALIGN - 1) // _ALIGN * _ALIGN
        return tuple(entries)

    def _replicate(self, epoch: int, dests: set[int] | None = None, owners: set[int] | None = None) -> None:
        """Send our newest slot to the buddies and receive theirs, on the C thread (only to
        ``dests`` and from ``owners`` when given)."""
        if self._scomm is None:
            self._setup()
        rank, size = self._scomm.Get_rank(), self._scomm.Get_size()
        mine = self._own[self._committed]
        mine.hdr[0], mine.hdr[1], mine.hdr[2], mine.hdr[3] = epoch, mine.nbytes, mine.digest, rank
        ops, meaning = [], []
        for d in range(1, self._replicas + 1):
            dest = (rank + d) % size
            if dests is None or dest in dests:
                ops += [(dest, _TAG_HDR, 1, mine.hdr, 32), (dest, _TAG_DATA, 1, mine.ptr, mine.nbytes)]
                meaning += [None, None]
        for d in range(1, self._replicas + 1):
            owner = (rank - d) % size
            if owners is not None and owner not in owners:
                continue
            pair = self._held[owner]
            newest = max(pair, key=lambda s: s.epoch)
            slot = pair[1] if newest is pair[0] else pair[0]  # never the newest replica
            slot.epoch = -1
            ops += [(owner, _TAG_HDR, 0, slot.hdr, 32), (owner, _TAG_DATA, 0, slot.ptr, slot.nbytes)]
            meaning += [("hdr", owner, slot, epoch), ("data", owner, slot, epoch)]
        self._repl = self._repl or _Replicator()
        self._repl.start(self._scomm, ops, meaning, barrier=True)

    def _collect(self) -> None:
        """Mark the replicas that the last replication delivered completely."""
        repl = self._repl
        if repl is None or not repl.ops:
            return
        if repl.running and repl.wait(0.0) == 1:
            return
        ok: dict[int, bool] = {}
        for i, what in enumerate(repl.ops):
            if what is not None:
                key = id(what[2])
                ok[key] = ok.get(key, True) and repl.op_ok(i)
        for what in repl.ops:
            if what is not None and what[0] == "data" and ok[id(what[2])]:
                _kind, owner, slot, epoch = what
                if int(slot.hdr[0]) != epoch:
                    raise ValueError(f"commit epochs differ between ranks: rank {owner} committed epoch "
                                     f"{int(slot.hdr[0])} while this rank committed {epoch}; every rank must "
                                     f"commit the same epoch")
                slot.epoch, slot.digest = epoch, int(slot.hdr[2])
        repl.ops = []

    def _stop_replication(self, revoke: bool, grace: float = 0.0) -> None:
        """End the replication job: let it finish for ``grace`` seconds, then revoke the snapshot
        communicator (its pending requests end with ERR_REVOKED on every rank)."""
        repl = self._repl
        if repl is None:
            return
        if repl.running and repl.wait(grace) == 1:
            if revoke and self._scomm is not None:
                try:
                    self._scomm.Revoke()  # completes its pending requests with ERR_REVOKED
                except MPI.Exception:
                    pass
            if repl.wait(2.0) == 1 and not self._abandon(repl, 1.0):
                return
        self._collect_failed_safely()

    def _abandon(self, repl: _Replicator, timeout: float) -> bool:
        """Make the replication thread give up its job (it leaves at its next poll). False if it
        is stuck inside an MPI call: then it and the slots it may still write are never freed,
        and new replica slots will be made."""
        _cext().lib.dpmpi_repl_abandon(repl.raw)
        if repl.wait(timeout) != 1:
            return True
        keep_forever((repl, list(self._held.values())))
        self._held, self._repl = {}, None
        return False

    def _collect_failed_safely(self) -> None:
        try:
            self._collect()
        except ValueError:
            if self._repl is not None:
                self._repl.ops = []

    # -- the repair listener contract (ResilientComm.add_repair_listener) --
    def repair_begins(self) -> None:
        """Called by a repair on this process before its first MPI call: stop the replication
        thread (it must not call MPI while the repair does: seen here, Open MPI segfaulted in
        Shrink's agreement while that thread polled its requests), and keep a background commit
        from starting another; then revoke the snapshot communicator, so that the peers'
        replications waiting for this process end too. ``restore()`` starts afresh."""
        with self._mpi_lock:
            self._interrupted = True
            repl = self._repl
            if repl is not None and repl.raw is not None and repl.running and repl.wait(0.0) == 1:
                self._abandon(repl, 2.0)
        if self._scomm is not None:
            try:
                self._scomm.Revoke()
            except MPI.Exception:
                pass

    def repair_done(self, event: Any) -> None:
        """A repair committed: remember its renumbering (policy "shrink"), applied by restore()."""
        if any(old != new for old, new in event.renumber.items()):
            self._renumbers.append(dict(event.renumber))

    def _link(self) -> None:
        add = getattr(self._comm, "add_repair_listener", None)
        if add is not None:  # a dpmpi resilient communicator (or one derived from it)
            add(self)

    def _free_scomm(self) -> None:
        if self._scomm is not None:
            try:
                self._scomm.Free()
            except MPI.Exception:
                pass
            self._scomm = None

    # -- restore --
    @uninterrupted
    def restore(self) -> int:
        """Write the newest globally restorable epoch back into the arrays; return it.

        Collective over the communicator (after ``comm.Respawn()`` when a rank failed; a
        replacement calls it on a Snapshot it just made). Survivors restore from their own slot,
        a replacement from a buddy's copy. Raises ``SnapshotLostError`` when a rank and all its
        copies are gone (after trying ``persist_dir`` when one is configured)."""
        self._check_open()
        t0 = time.perf_counter()
        timings: dict[str, float] = {}
        # 1. quiesce: a background commit, the staging copy (discarded) and a replication that a
        # failure interrupted. A background commit that failed (a peer died) is expected here.
        if self._auto is not None:
            # it may wait (in the copy's gate) for a replication that the failure stalled
            if self._repl is not None and self._repl.running and self._repl.wait(0.05) == 1:
                self.repair_begins()
            self._join_auto()
        self._stop_replication(revoke=True)
        if self._staging is not None:
            self._last_rc, _digest = self._engine.wait()
            self._staging = None
        if self._unstaged is not None:
            slot, epoch_before, digest_before = self._unstaged
            if self._last_rc == _GATE_FAILED and slot.epoch < 0:  # the copy never wrote: still intact
                slot.epoch, slot.digest = epoch_before, digest_before
            self._unstaged = None
        self._join_writer()
        self._renumber()
        timings["quiesce"] = time.perf_counter() - t0
        # 2. a new communicator, and what everyone holds
        t = time.perf_counter()
        self._setup_comm_only("Snapshot.restore")
        self._interrupted = False
        scomm = self._scomm
        rank, size = scomm.Get_rank(), scomm.Get_size()
        own = {s.epoch: s.digest for s in self._own if s.epoch >= 0}
        held = {o: {s.epoch: s.digest for s in pair if s.epoch >= 0} for o, pair in self._held.items()}
        try:
            infos = scomm.allgather((rank, _signature(self._entries), own, held, self._layouts,
                                     self._disk_epochs(rank)))
        except MPI.Exception as exc:
            raise from_mpi(exc, scomm, "Snapshot.restore") from exc
        timings["agree"] = time.perf_counter() - t
        avail: dict[int, set[int]] = {r: set() for r in range(size)}
        for r, _sig, own_r, held_r, _l, _d in infos:
            avail[r] |= set(own_r)
            for owner, epochs in held_r.items():
                if owner < size:
                    avail[owner] |= set(epochs)
        # the layouts that were registered for each logical rank (a replacement must match)
        known: dict[int, list] = {}
        for _r, _sig, _o, _h, layouts, _d in infos:
            for owner, sig in layouts.items():
                known.setdefault(owner, sig)
        mismatch = [r for r, sig, *_ in infos if r in known and json.dumps(known[r]) != json.dumps(sig)]
        if mismatch:
            r = mismatch[0]
            raise ValueError(f"rank {r} registered different arrays than the rank it replaces had: "
                             f"{infos[r][1]} vs {known[r]}; a replacement must register the same names, "
                             f"dtypes and shapes")
        self._layouts = {r: sig for r, sig, *_ in infos}
        if not any(avail.values()):
            raise ValueError("restore() before any commit: no rank holds a committed snapshot. Call "
                             "snap.stage() and snap.commit(epoch) first")
        common = set.intersection(*avail.values())
        if not common:
            lost = tuple(r for r in range(size) if not avail[r]) or tuple(
                r for r in range(size) if max(avail[r]) < max(max(v) for v in avail.values()))
            disk = [set(d) for *_x, d in infos]
            on_disk = set.intersection(*disk) if disk else set()
            if on_disk:
                return self._restore_from_disk(max(on_disk), lost, t0)
            raise SnapshotLostError(
                f"snapshot lost for rank(s) {list(lost)}: each of them and every holder of its copies failed "
                f"together, so no epoch survives for every rank"
                + ("" if self._persist_dir is None else f" (and {self._persist_dir} has no epoch common to all ranks)")
                + ". Use more replicas (Snapshot(..., replicas=K)) or persist_dir for a disk fallback.",
                MPI.ERR_PROC_FAILED, lost)
        epoch = max(common)
        # 3. transfers: a rank without its own copy gets it from the lowest holder
        t = time.perf_counter()
        reqs, incoming = [], None
        for r, _sig, own_r, _h, _l, _d in infos:
            if epoch in own_r:
                continue
            holder = min(h for h, _s, _o, held_h, _l2, _d2 in infos if epoch in held_h.get(r, {}))
            if r == rank:
                target = self._own[0]
                target.epoch = -1
                self._own[1].epoch = -1
                incoming = target
                reqs += self._post_slot(scomm.Irecv, holder, target)
            if holder == rank:
                slot = next(s for s in self._held[r] if s.epoch == epoch)
                slot.hdr[0], slot.hdr[1], slot.hdr[2] = epoch, slot.nbytes, slot.digest
                reqs += self._post_slot(scomm.Isend, r, slot)
        _waitall(reqs, scomm, "Snapshot.restore (transfer)")
        timings["transfer"] = time.perf_counter() - t
        # 4. verify, everywhere, then write back
        t = time.perf_counter()
        if incoming is not None:
            incoming.epoch, incoming.digest = int(incoming.hdr[0]), int(incoming.hdr[2])
            self._committed = 0
        else:
            self._committed = next(i for i, s in enumerate(self._own) if s.epoch == epoch)
        slot = self._own[self._committed]
        src, lens = _segments(self._entries, slot.ptr)
        good = slot.epoch == epoch and self._engine.checksum(src, lens) == slot.digest
        try:
            bad = scomm.allgather(not good)
        except MPI.Exception as exc:
            raise from_mpi(exc, scomm, "Snapshot.restore (verify)") from exc
        timings["verify"] = time.perf_counter() - t
        if any(bad):
            ranks = tuple(r for r, b in enumerate(bad) if b)
            raise SnapshotLostError(f"snapshot of epoch {epoch} failed its checksum on rank(s) {list(ranks)}: "
                                    f"the copy is corrupt", MPI.ERR_OTHER, ranks)
        t = time.perf_counter()
        self._write_back(slot)
        timings["copy"] = time.perf_counter() - t
        # 5. keep only this epoch; make replica slots for the new topology; re-replicate
        for other in self._own:
            if other is not slot:
                other.epoch = -1
        for pair in self._held.values():
            for s in pair:
                if s.epoch != epoch:
                    s.epoch = -1
        self._epoch = epoch
        t = time.perf_counter()
        if self._replicas:
            self._make_replica_slots()
            self._rereplicate(epoch, infos)
        timings["rereplicate_post"] = time.perf_counter() - t
        self.last_restore = {"epoch": epoch, "received": incoming is not None,
                             "ms": {k: round(1e3 * v, 3) for k, v in timings.items()},
                             "total_ms": round(1e3 * (time.perf_counter() - t0), 3)}
        return epoch

    def _setup_comm_only(self, op: str) -> None:
        """A new communicator for snapshot traffic, duplicated from the current one (collective)."""
        if MPI.Query_thread() < MPI.THREAD_MULTIPLE and self._replicas:
            raise RuntimeError("dpmpi.Snapshot replicates on a background thread and needs MPI_THREAD_MULTIPLE; "
                               "do not lower mpi4py.rc.thread_level (its default, 'multiple', is right)")
        _bind_mpi()
        self._free_scomm()
        comm = self._comm.mpi
        try:
            scomm = comm.Dup()
        except MPI.Exception as exc:
            raise from_mpi(exc, comm, op) from exc
        _warm_up(scomm, op)
        self._scomm = scomm
        self._link()

    def _renumber(self) -> None:
        """Follow the repairs since the last setup: under policy 'shrink' ranks are renumbered."""
        for renumber in self._renumbers:
            self._held = {renumber[o]: pair for o, pair in self._held.items() if o in renumber}
            self._layouts = {renumber[o]: sig for o, sig in self._layouts.items() if o in renumber}
        self._renumbers = []

    @staticmethod
    def _post_slot(post: Any, peer: int, slot: _Slot) -> list:
        """A slot's header and data as non-blocking messages (``post``: comm.Isend or comm.Irecv),
        in chunks of at most 1 GiB."""
        reqs = [post([_cext().ffi.buffer(slot.hdr), MPI.BYTE], peer, _TAG_HDR)]
        view = slot.buffer()
        for off in range(0, max(slot.nbytes, 1), _CHUNK):
            reqs.append(post([view[off:off + _CHUNK], MPI.BYTE], peer, _TAG_DATA))
        return reqs

    def _write_back(self, slot: _Slot) -> None:
        dst, views = self._sources()
        _prefault(dst, views)  # (at once when the pages are there)
        src, lens = _segments(self._entries, slot.ptr)
        self._engine.start(dst, src, lens)
        rc, _digest = self._engine.wait()
        if rc != 0:
            raise SnapshotCopyError(f"copying the snapshot back into the arrays failed (code {rc})")
        if self._device is not None:  # GPU: mirrors -> device
            self._device.restore()

    def _rereplicate(self, epoch: int, infos: list) -> None:
        """After a restore, send each rank's copy of ``epoch`` to the buddies that lack it (the
        replacement's, and those that the failed rank held), on the background thread."""
        rank, size = self._scomm.Get_rank(), self._scomm.Get_size()
        has = {r: {o for o, epochs in held_r.items() if epoch in epochs} for r, _s, _o, held_r, _l, _d in infos}
        dests = {dest for dest in ((rank + d) % size for d in range(1, self._replicas + 1)) if rank not in has[dest]}
        owners = {o for o in ((rank - d) % size for d in range(1, self._replicas + 1)) if o not in has[rank]}
        self._replicate(epoch, dests, owners)

    # -- persistence --
    def _file(self, rank: int, epoch: int) -> str:
        assert self._persist_dir is not None
        return os.path.join(self._persist_dir, f"rank{rank:05d}.epoch{epoch:010d}.dpmpi")

    def _disk_epochs(self, rank: int) -> list[int]:
        if self._persist_dir is None:
            return []
        return _disk_epochs(self._persist_dir, rank)

    def _persist(self, slot: _Slot) -> None:
        self._join_writer()
        rank = self._comm.Get_rank()
        header = {"magic": _FILE_MAGIC, "epoch": slot.epoch, "rank": rank, "digest": slot.digest,
                  "nbytes": slot.nbytes, "layout": _signature(self._entries)}
        path, keep = self._file(rank, slot.epoch), self._persist_dir

        def write() -> None:
            try:
                tmp = path + f".tmp{os.getpid()}"
                with open(tmp, "wb") as f:
                    f.write((json.dumps(header) + "\n").encode())
                    f.write(slot.buffer())
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
                for old in _disk_epochs(keep, rank)[:-2]:  # keep the newest two
                    try:
                        os.unlink(self._file(rank, old))
                    except OSError:
                        pass
            except BaseException as exc:  # reported on the main thread at the next join
                self._writer_error = exc

        self._writer_slot = slot
        self._writer = threading.Thread(target=write, name="dpmpi-persist", daemon=True)
        self._writer.start()

    def _join_writer(self) -> None:
        if self._writer is not None:
            self._writer.join()
            self._writer, self._writer_slot = None, None
        if self._writer_error is not None:
            exc, self._writer_error = self._writer_error, None
            raise OSError(f"dpmpi: writing a snapshot file to {self._persist_dir} failed: {exc}") from exc

    def _restore_from_disk(self, epoch: int, lost: tuple[int, ...], t0: float) -> int:
        warnings.warn(f"dpmpi: in-memory snapshots lost for rank(s) {list(lost)}; restoring epoch {epoch} "
                      f"from {self._persist_dir}", RuntimeWarning, stacklevel=3)
        rank = self._scomm.Get_rank()
        _load_file(self._file(rank, epoch), self._arrays, self._entries, self._engine)
        if self._device is not None:  # GPU: mirrors -> device
            self._device.restore()
        for s in self._own:
            s.epoch = -1
        for pair in self._held.values():
            for s in pair:
                s.epoch = -1
        self._committed, self._epoch = -1, epoch
        if self._replicas:
            self._make_replica_slots()
        self.last_restore = {"epoch": epoch, "from_disk": True, "total_ms": round(1e3 * (time.perf_counter() - t0), 3)}
        return epoch

    @classmethod
    @uninterrupted
    def load(cls, comm: Any, arrays: Mapping[str, Any], persist_dir: str | os.PathLike) -> int:
        """Fill ``arrays`` from the newest epoch that ``persist_dir`` holds for every rank, and
        return it (collective over ``comm``): a whole job restarting from disk."""
        raw = comm.mpi if isinstance(comm, Comm) else comm
        if not isinstance(raw, MPI.Intracomm):
            raise TypeError(f"Snapshot.load needs a dpmpi.Comm or an mpi4py Intracomm, got {type(comm).__name__}")
        directory = os.fspath(persist_dir)
        entries = _layout(dict(arrays))
        rank = raw.Get_rank()
        try:
            lists = raw.allgather(_disk_epochs(directory, rank))
        except MPI.Exception as exc:
            raise from_mpi(exc, raw, "Snapshot.load") from exc
        common = set.intersection(*(set(x) for x in lists)) if lists else set()
        if not common:
            missing = [r for r, x in enumerate(lists) if not x]
            raise SnapshotLostError(f"{directory} holds no epoch common to all {len(lists)} ranks "
                                    f"(ranks without any file: {missing})", MPI.ERR_OTHER, tuple(missing))
        epoch = max(common)
        engine = _Engine(1)
        _load_file(os.path.join(directory, f"rank{rank:05d}.epoch{epoch:010d}.dpmpi"), dict(arrays), entries, engine)
        return epoch


def _waitall(reqs: list, comm: MPI.Comm, op: str) -> None:
    """Waitall whose failure is reported as the error of the request that failed (not as
    ERR_IN_STATUS), so that a peer's failure is a ProcFailedError/RevokedError. Requests left
    pending keep their slot memory for the life of the process."""
    statuses = [MPI.Status() for _ in reqs]
    try:
        MPI.Request.Waitall(reqs, statuses)
    except MPI.Exception as exc:
        keep_pending(reqs)
        raise from_mpi(cause_of(exc, statuses), comm, op) from exc


def _disk_epochs(directory: str, rank: int) -> list[int]:
    prefix = f"rank{rank:05d}.epoch"
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return sorted(int(n[len(prefix):-len(".dpmpi")]) for n in names
                  if n.startswith(prefix) and n.endswith(".dpmpi") and n[len(prefix):-len(".dpmpi")].isdigit())


def _load_file(path: str, arrays: dict, entries: tuple[_Entry, ...], engine: _Engine) -> None:
    ext = _cext()
    with open(path, "rb") as f:
        header = json.loads(f.readline())
        if header.get("magic") != _FILE_MAGIC:
            raise ValueError(f"{path} is not a dpmpi snapshot file")
        if header["layout"] != _signature(entries):
            raise ValueError(f"{path} holds arrays {header['layout']}, but {_signature(entries)} are registered")
        for entry in entries:
            view = _view(entry.name, arrays[entry.name]).cast("B")
            f.seek(len(json.dumps(header)) + 1 + entry.offset)
            if f.readinto(view) != entry.nbytes:
                raise ValueError(f"{path} is truncated (array {entry.name!r})")
    ptrs = [ext.ffi.from_buffer(_view(e.name, arrays[e.name])) for e in entries]
    if engine.checksum(ptrs, [e.nbytes for e in entries]) != header["digest"]:
        raise SnapshotLostError(f"{path} failed its checksum: the file is corrupt", MPI.ERR_OTHER, (header["rank"],))
