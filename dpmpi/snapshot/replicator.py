"""The C replication thread (``cext/dpmpi_snap.c``): one job at a time of non-blocking sends and
receives on dpmpi's snapshot communicator, then a barrier of its own point-to-point messages.

Owner and lifetime: a ``Replicator`` belongs to one ``Replication`` (one Snapshot); its C thread
calls MPI (MPI_THREAD_MULTIPLE) only while a job runs, and a repair stops it first
(``abandon``). It is freed by ``close`` only when no job runs; else it and the memory of its
job are kept for the life of the process (MPI may still complete a request on them).
"""
from __future__ import annotations

from typing import Any

from mpi4py import MPI

from dpmpi import _guard
from dpmpi.errors import PEER_FAILURE_CLASSES, DpmpiError, ProcFailedError
from dpmpi.snapshot.native import Codes, cext

_MPI_BOUND = False


def bind_mpi() -> None:
    """Point the C replication at the libmpi that mpi4py loaded (once per process)."""
    global _MPI_BOUND
    if _MPI_BOUND:
        return
    path = _guard.libmpi_path()
    if path is None or cext().lib.dpmpi_mpi_bind(path.encode()) != 0:
        raise RuntimeError("dpmpi: cannot find the MPI library's functions for snapshot replication "
                           f"(libmpi: {path}); dpmpi supports Open MPI 5")
    _MPI_BOUND = True


class Replicator:
    """The C replication thread."""

    def __init__(self) -> None:
        ext = cext()
        raw = ext.lib.dpmpi_repl_new()
        if raw == ext.ffi.NULL:
            raise RuntimeError("dpmpi: cannot start the snapshot replication thread")
        self.raw = raw
        self.running = False
        self.error = 0  # MPI error class of the last job's failure
        self.ops: list[tuple[str, Any]] = []  # what each op of the running job was, for collect()
        self._keep: list = []

    def start(self, comm: MPI.Comm, ops: list[tuple[int, int, int, Any, int, int]], meaning: list, barrier: bool,
              feed: tuple[Any, int] | None = None) -> None:
        """Start a job of ``ops`` (peer, tag, send, buffer, length, wait): a send with wait 1 goes
        chunk by chunk as copy job ``feed`` (engine, job number) writes its bytes, one with wait 2
        once ``release`` is called; the others at once."""
        ext = cext()
        cops = ext.ffi.new("dpmpi_op[]", max(len(ops), 1))
        for i, (peer, tag, send, buf, n, wait) in enumerate(ops):
            cops[i].peer, cops[i].tag, cops[i].send, cops[i].buf, cops[i].len = peer, tag, send, buf, n
            cops[i].wait = wait
        self._keep = [cops, ops, feed]
        engine, feed_job = feed if feed is not None else (ext.ffi.NULL, 0)
        rc = ext.lib.dpmpi_repl_start(self.raw, ext.ffi.cast("void *", MPI._handleof(comm)),
                                      ext.ffi.cast("void *", MPI._handleof(MPI.BYTE)), len(ops), cops, int(barrier),
                                      engine, feed_job)
        if rc != 0:
            raise RuntimeError(f"dpmpi: the snapshot replication thread refused a job (code {rc})")
        self.ops = meaning
        self.running = True

    def wait(self, timeout: float = -1.0) -> int:
        """0 done, 1 still running, < 0: -(MPI error class). Without a timeout the calling thread
        drives MPI's progress while it waits: call it only from the program's thread."""
        lib = cext().lib
        rc = lib.dpmpi_repl_wait_progress(self.raw) if timeout < 0 else lib.dpmpi_repl_wait(self.raw, timeout)
        if rc != 1:
            self.running = False
            self.error = -rc if rc < 0 else 0
        return rc

    def still_running(self) -> bool:
        """A job runs and has not ended yet (does not block)."""
        return self.running and self.wait(0.0) == 1

    def release(self) -> None:
        """The job's held-back header sends (wait 2) may go: the slot they describe is sealed."""
        cext().lib.dpmpi_repl_release(self.raw)

    def op_ok(self, i: int) -> bool:
        return cext().lib.dpmpi_repl_op_state(self.raw, i) == 1

    def leaked(self) -> int:
        """Sends its jobs left to MPI after their barrier completed (their buffers must be kept)."""
        return cext().lib.dpmpi_repl_leaked(self.raw)

    def abandon(self) -> None:
        """Make the thread give up its job (it leaves at its next poll)."""
        cext().lib.dpmpi_repl_abandon(self.raw)

    def close(self, timeout: float) -> bool:
        ok = cext().lib.dpmpi_repl_free(self.raw, timeout) == 0
        self.raw = None
        return ok


def job_failure(repl: Replicator | None, what: str) -> DpmpiError:
    """The error for a replication job (``what``) that failed: a peer failed, or a repair on
    this process abandoned it."""
    cls = MPI.ERR_PROC_FAILED
    if repl is not None:
        repl.wait(0.0)
        cls = repl.error or cls
    if cls == Codes.abandoned():  # a repair on this process stopped it
        return ProcFailedError(f"{what} was stopped by a repair on this process; call snap.restore() after it",
                               MPI.ERR_PROC_FAILED)
    if cls not in PEER_FAILURE_CLASSES:
        return DpmpiError(f"MPI error class {cls} during {what}", cls)
    return ProcFailedError(
        f"a peer process failed during {what} (MPI error class {cls}). Repair the communicator "
        f"(comm.Respawn()), then call snap.restore().", cls)
