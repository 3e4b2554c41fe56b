"""The public ``Snapshot``: argument checks, the order of the steps, and delegation to the parts
that own the state (``buffers``, ``replication``, ``persistence``, ``committer``, ``restore``)."""
from __future__ import annotations

import atexit
import os
import threading
import time
import weakref
from types import MappingProxyType
from typing import Any, Mapping

from mpi4py import MPI

from dpmpi import _guard, config, faults, init_mark
from dpmpi.comm import Comm
from dpmpi.mpicall import keep_forever
from dpmpi.resilient import Role
from dpmpi.snapshot import persistence
from dpmpi.snapshot import restore
from dpmpi.snapshot.buffers import Buffers
from dpmpi.snapshot.committer import Committer
from dpmpi.snapshot.errors import SnapshotLostError
from dpmpi.snapshot.generators import Generators
from dpmpi.snapshot.layout import layout
from dpmpi.snapshot.native import Codes
from dpmpi.snapshot.persistence import Persistence
from dpmpi.snapshot.replication import Replication
from dpmpi.interrupts import uninterrupted

ENV_THREADS = "DPMPI_COPY_THREADS"
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
_guard.before_mpi_ends(_close_open_snapshots)  # (a program's own MPI.Finalize() comes first)


def _int_arg(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _grown(name: str, value: Any, last: int) -> int:
    value = _int_arg(name, value, 0)
    if value <= last:
        raise ValueError(f"commit({value}): epochs must grow; the last committed epoch is {last}")
    return value


def _dropped(snap: Snapshot) -> None:
    """A Snapshot dropped without close(): nothing it owns may be freed while a copy or a
    replication may still use it (the interpreter's exit closes open ones first)."""
    if getattr(snap, "_closed", True):
        return
    try:
        repl = snap._replication.repl
        if snap._committer.started or snap._buffers.engine.busy() or (repl is not None and repl.running):
            snap._leak()
    except Exception:
        pass


def _threads_from(value: int | None) -> int:
    if value is None:
        value = config.get(ENV_THREADS)
    value = _int_arg("threads", value, 1)
    if value > 64:
        raise ValueError(f"threads={value}: at most 64 copy threads")
    return value


def _commit(buffers: Buffers, replication: Replication, persistence: Persistence, epoch: int, comm: Any) -> float:
    """A commit's steps (``Snapshot._commit_now``): the replication starts while the copy still
    runs where it may (``Replication.stream``), then the copy ends, is sealed and replicated (or
    its header released), and written to a file when due. Returns the ms waited for the copy."""
    t0 = time.perf_counter()
    streamed = replication.stream(epoch, buffers.feed())  # (each piece goes as soon as it is copied)
    target, rc, digest = buffers.finish_copy()
    waited = 1e3 * (time.perf_counter() - t0)
    if rc != 0 and streamed:
        replication.cancel()
    if rc == Codes.gate_failed():
        replication.raise_peer_failure("snapshot replication of the previous epoch")
    buffers.check_copy(epoch, rc)
    replication.collect()
    slot = buffers.seal(target, epoch, digest)
    if replication.replicas:
        replication.commit(epoch, slot, streamed=streamed)
    if persistence.due(epoch):
        persistence.write(slot, comm.Get_rank(), buffers.entries)
    return waited


def _end_prologue(comm: Any) -> bool:
    """The first of stage, commit and restore ends the program's prologue on its communicator (on
    a replacement, its replay: dpmpi.resilient.prologue). Whether this process replaces a rank
    that died in the setup, before any snapshot existed (its restore has nothing to restore)."""
    end = getattr(type(comm), "end_prologue", None)
    return bool(end(comm)) if end is not None else False


def _nothing_to_restore(as_built: bool) -> dict[str, Any]:
    """``restore()`` on a replacement of a rank that died in the setup, before any snapshot existed
    (dpmpi.resilient.setup): the survivors take the first snapshot next. Its ``last_restore``, with
    ``as_built`` (the documented way to learn that nothing was restored: -1, then stage and commit
    the first epoch with them); without it, the program would take -1 for an epoch."""
    if not as_built:
        raise SnapshotLostError(
            "this process replaces a rank that died in the setup, before any snapshot existed: there is nothing to "
            "restore, and the survivors take the first snapshot next. Call restore(carry=-1, as_built=True) on a "
            "replacement and, when it returns -1, stage() and commit() the first epoch as the survivors do "
            "(examples/primitives.py)", MPI.ERR_OTHER)
    return {"epoch": -1, "carried": -1, "first_epoch_again": True, "setup": True, "total_ms": 0.0}


class Snapshot:
    """In-memory snapshots of a rank's arrays, double-buffered and replicated to buddies.

    ``arrays`` maps names to C-contiguous writable buffers (numpy arrays, bytearrays, ...); each
    rank registers its own (names, shapes and dtypes may differ between ranks). ``replicas`` other
    ranks hold a copy of each rank's committed snapshot (default 1, its ring neighbour; 0 keeps
    only the local copy). ``threads`` copy threads (default ``DPMPI_COPY_THREADS`` or 1). ``persist_dir``/
    ``persist_every``: every K-th committed epoch also to disk, the fallback when copies are lost."""

    @uninterrupted  # (and not a stall: its memory's allocation and pre-faulting can take seconds)
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
        if bad := [name for name in arrays if not isinstance(name, str)]:
            raise TypeError(f"snapshot array names must be str, got {bad[0]!r}")
        from dpmpi.gpu import devsnap

        arrays = dict(arrays)
        self._generators = Generators(arrays)  # (a random generator: its state, as a byte array)
        device = devsnap.device_slots(arrays)  # device arrays: copied straight into the slots
        entries = layout(arrays, {n: devsnap.describe(a) for n, a in device.device.items()} if device else None)
        waiting = getattr(self._comm, "role", None) is Role.SPARE
        size = self._comm.active_size if waiting else self._comm.Get_size()
        n = _int_arg("replicas", replicas, 0)
        if n > size - 1:
            if replicas == 1 and size == 1:
                n = 0  # the default on a single rank: nowhere to replicate to
            else:
                raise ValueError(f"replicas={replicas} on a communicator of size {size}: at most {size - 1}")
        threads = _threads_from(threads)
        every = _int_arg("persist_every", persist_every, 0)
        directory = None if persist_dir is None else os.fspath(persist_dir)
        if every and directory is None:
            raise ValueError("persist_every needs persist_dir (the directory for the snapshot files)")
        if directory is not None:
            os.makedirs(directory, exist_ok=True)
            every = every or 1
        # (a replacement's own slots: locked at their first write, its refill after a direct restore)
        self._buffers = buf = Buffers(arrays, entries, threads, bool(lock_memory), device,
                                      lazy=getattr(self._comm, "role", None) is Role.RECOVERED)
        self._replication = Replication(self._comm, entries, n, bool(lock_memory), n if waiting else 0, buf.shift)
        self._persistence, self._committer = Persistence(directory, every), Committer()
        self._refilling = self._closed = False  # _refilling: the committer runs a restore's refill (restore(swap=True))
        self._copied = threading.Event()  # set by that refill once the arrays may change (wait_refill(copy_only=True))
        self.stats: dict[str, float] = {"stage_ms": 0.0, "commit_wait_ms": 0.0, "bytes": float(self.nbytes)}
        self.last_restore: dict[str, Any] = {}
        _OPEN.add(self)

    @property
    def epoch(self) -> int:
        """The newest epoch committed on this rank (-1: none)."""
        return self._buffers.epoch

    @property
    def nbytes(self) -> int:
        return self._buffers.nbytes

    @property
    def locked(self) -> bool:
        """Whether this rank's snapshot memory is locked in RAM (a replacement's: from its first
        write, which its restore or refill makes)."""
        return all(s.locked for s in self._buffers.own)

    @property
    def arrays(self) -> Mapping[str, Any]:
        """The registered arrays, by name (a read-only mapping; the arrays themselves are yours)."""
        return MappingProxyType(self._buffers.arrays)

    def holdings(self) -> dict[int, dict[int, int]]:
        """What this rank holds (local): {logical rank: {epoch: checksum}}, its own and its buddies'."""
        rank = self._comm.Get_rank() if self._replication.scomm is None else self._replication.scomm.Get_rank()
        return {**self._replication.holdings(), rank: self._buffers.holdings()}

    def _check_open(self) -> bool:
        if self._closed:
            raise ValueError("this Snapshot is closed")
        return _end_prologue(self._comm)  # (stage, commit and restore check)

    @uninterrupted
    def stage(self, epoch: int | None = None) -> None:
        """Start copying the registered arrays into the free slot; returns at once (local).

        The arrays must not be modified until ``commit()``; reading them is fine. With ``epoch``,
        the copy is committed as that epoch in the background as soon as it is done (sealed and
        replicated without waiting for the program to call ``commit``), so that a failure soon
        after loses less; ``commit(epoch)`` then waits for that. Every rank must then stage the
        same epochs (the first such call is collective: it sets up replication)."""
        self._check_open()
        self.wait_refill()
        if self._buffers.staging is not None or self._committer.pending is not None:
            raise ValueError("stage() was already called; call commit(epoch) before staging again")
        if epoch is not None:
            epoch = _grown("epoch", epoch, self.epoch)
            if self._replication.replicas and self._replication.scomm is None:
                self._replication.setup()
        self._generators.save()
        t0 = time.perf_counter()
        if self._buffers.device is not None:  # the device writes the slot at once: not gated
            self._replication.wait()
        self._buffers.stage(self._replication.gate(), self._persistence.join_if_writing)
        self.stats["stage_ms"] = 1e3 * (time.perf_counter() - t0)
        if epoch is not None:
            self._committer.submit(epoch, self._commit_now)

    def busy(self) -> bool:
        """Whether a copy, a background commit or refill, or a replication still runs (local)."""
        if self._closed:
            return False
        return self._committer.running() or self._buffers.engine.busy() or self._replication.busy()

    @uninterrupted
    def wait(self) -> None:
        """Wait for the last commit's replication and file write (local); ProcFailedError if a peer failed."""
        self._refilling = False
        joined = self._committer.join()
        if joined is not None and joined[1] is not None:
            raise joined[1]
        self._persistence.join()
        self._replication.wait()

    @uninterrupted
    def close(self) -> None:
        """Stop the threads and free the memory (local). Later calls raise ValueError."""
        if self._closed:
            return
        self._committer.close()
        self._buffers.engine.wait()
        self._persistence.join()
        if not self._replication.close():
            self._leak()
        self._buffers.close_device()
        self._closed = True
        _OPEN.discard(self)

    def _leak(self) -> None:  # (MPI may still complete a request on them: a replication a failure cut)
        """Keep this Snapshot's memory and threads for the life of the process."""
        keep_forever((self._buffers.own, self._replication.memory(), self._buffers.engine))

    def __del__(self) -> None:
        _dropped(self)

    def _inject_copy_failure(self, after_bytes: int, pull: bool = False) -> None:  # test hook: the next copy stops
        self._buffers.engine.inject(after_bytes, pull)  # after it (pull: a restore's read of a peer's copy, half-way)

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @uninterrupted
    def commit(self, epoch: int, *, durable: bool = True) -> None:
        """Seal the staged copy as ``epoch`` and replicate it to the buddies.

        Collective over the communicator: every rank commits the same epoch, larger than the last.
        Blocking. With ``durable=True`` (the default) it returns when ``epoch`` is restorable for
        every rank (sealed here, held by the buddies, the same on every rank: a closing barrier); a
        failure of any rank after that restores ``epoch`` or a later one. With ``durable=False`` it
        returns once sealed locally; the replication goes on in the background (``wait()`` waits for
        it), so a failure before it ends may restore the previous epoch. After ``stage(epoch)``, it
        waits for that epoch's background commit. The first commit tells dpmpi-run (setup_loss)."""
        self._check_open()
        faults.point("snapshot-commit")  # (tests: a rank dies here, the others inside the commit's collectives)
        self.wait_refill()
        t0 = time.perf_counter()
        if self._committer.pending is not None:
            auto_epoch, error = self._committer.join()
            if epoch != auto_epoch:
                raise ValueError(f"commit({epoch}) after stage(epoch={auto_epoch}): the epochs must be the same")
            if error is not None:
                raise error
        else:
            epoch = _grown("epoch", epoch, self.epoch)
            if self._buffers.staging is None:
                raise ValueError("commit() without stage(): call snap.stage() after updating the arrays")
            self._commit_now(epoch)
        if durable:
            self.wait()
        self.stats["commit_wait_ms"] = 1e3 * (time.perf_counter() - t0)
        init_mark.announce_commit()

    def _commit_now(self, epoch: int) -> None:
        self.stats["commit_wait_ms"] = _commit(self._buffers, self._replication, self._persistence, epoch, self._comm)

    # -- the repair listener contract, for callers that hold the Snapshot (Replication is the listener) --
    def repair_begins(self) -> None:
        """Stop the replication before a repair's first MPI call (see ``Replication``)."""
        self._replication.repair_begins()

    def repair_done(self, event: Any) -> None:
        """A repair committed: remember its renumbering (policy "shrink"), applied by restore()."""
        self._replication.repair_done(event)

    @uninterrupted
    def restore(self, *, arrays_hold: int | None = None, carry: int = -1, swap: bool = False,
                as_built: bool = False, at_most: int | None = None) -> int:
        """Write the newest globally restorable epoch back into the arrays (and generators); return
        it (collective, after ``comm.Respawn()``; a replacement calls it on a new Snapshot). Survivors
        read their own slot, a replacement a buddy's copy (checksums checked). Options (docs/snapshots.md):
        ``arrays_hold``, ``carry``, ``swap``, ``as_built`` (-1: nothing restored), ``at_most``. ``SnapshotLostError``:
        a rank and its copies are gone (``persist_dir`` tried too), or a copy failed its checksum."""
        fresh = self._check_open()  # (a replacement of a rank that died in the setup: dpmpi.resilient.setup)
        hold = None if arrays_hold is None else _int_arg("arrays_hold", arrays_hold, 0)
        at_most = None if at_most is None else _int_arg("at_most", at_most, 0)
        carry = _int_arg("carry", carry, -1)
        t0 = time.perf_counter()
        if fresh:  # (no epoch exists: -1, local; the survivors take the first snapshot next)
            self.last_restore = _nothing_to_restore(bool(as_built))
            return -1
        self._refilling = False  # (quiesce waits for a refill still running)
        restore.quiesce(self._committer, self._buffers, self._replication, self._persistence)
        self._copied.clear()  # (no refill runs: quiesce joined it)
        epoch, self.last_restore, refill = restore.restore(
            self._buffers, self._replication, self._persistence, t0, {"quiesce": time.perf_counter() - t0}, hold,
            carry, bool(swap), bool(as_built), self._copied.set, at_most)
        if refill is not None:
            self._committer.submit(epoch, refill)
            self._refilling = True
        self._generators.load(epoch)
        return epoch

    @uninterrupted
    def wait_refill(self, *, copy_only: bool = False) -> None:
        """After ``restore(swap=True)``: return once the arrays may be modified (copied back into
        this rank's slot, which holds the epoch again) and the rest of that background job is
        done (its re-replication started; an error of the job raised here), or, ``copy_only``,
        once the arrays may be modified (``stage``, ``commit`` and ``wait`` wait for the rest). Local."""
        if self._refilling and copy_only:
            self._copied.wait()
        elif self._refilling:
            self._refilling = False
            _epoch, error = self._committer.join() or (0, None)
            if error is not None:
                raise error

    @classmethod
    @uninterrupted
    def load(cls, comm: Any, arrays: Mapping[str, Any], persist_dir: str | os.PathLike) -> int:
        """Fill ``arrays`` (random generators too) from the newest epoch ``persist_dir`` holds for
        every rank, and return it (collective over ``comm``): a whole job restarting from disk."""
        raw, gather = (comm.mpi, comm.allgather) if isinstance(comm, Comm) else (comm, None)  # (gather: prologue)
        return Generators.filled(arrays, lambda plain: persistence.load(raw, plain, os.fspath(persist_dir), gather))
