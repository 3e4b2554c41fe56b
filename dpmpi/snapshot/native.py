"""The C side of snapshots (``cext/dpmpi_snap.c``): slots of memory owned by dpmpi, the copy
engine, and the constants the C module defines (read from it, never copied here).

Ownership: a ``Slot``'s memory is freed by cffi's garbage collector when the last reference to
it goes; while a copy job or a replication may still write it, its owner keeps it (``Engine``
keeps a job's pointers until the job ends; a replication that a failure interrupted is kept
forever, see ``dpmpi.mpicall.keep_forever``).
"""
from __future__ import annotations

import functools
import os
import warnings
from typing import Any

from dpmpi import config


@functools.cache
def cext() -> Any:
    """The compiled module (imported late: ``dpmpi`` installs its exit guard first), with the
    engine's settings given to it once (validated by dpmpi.config; the C code reads no
    environment)."""
    from dpmpi import _cext

    _cext.lib.dpmpi_snap_configure(config.get("DPMPI_SNAPSHOT_NICE"), int(not config.get("DPMPI_NO_SIMD")),
                                   config.get("DPMPI_REPL_REPORT"), int(config.get("DPMPI_HUGE_PAGES")))
    return _cext


class Codes:
    """Results of the C engine and the replication thread, as the C module defines them."""

    @staticmethod
    def injected() -> int:  # the test hook stopped the copy half-way
        return cext().lib.DPMPI_ENGINE_INJECTED

    @staticmethod
    def gate_failed() -> int:  # the replication this copy waited for failed
        return cext().lib.DPMPI_ENGINE_GATE_FAILED

    @staticmethod
    def pull_failed() -> int:  # a pull could not read the other process
        return cext().lib.DPMPI_ENGINE_PULL_FAILED

    @staticmethod
    def abandoned() -> int:  # a replication job's "error class" when a repair abandoned it
        return cext().lib.DPMPI_REPL_ABANDONED

    @staticmethod
    def tags() -> tuple[int, int]:  # the replication's header and data messages
        lib = cext().lib
        return lib.DPMPI_TAG_HDR, lib.DPMPI_TAG_DATA

    @staticmethod
    def chunk() -> int:  # the largest message (MPI counts are ints)
        return cext().lib.DPMPI_CHUNK


_LOCK_WARNED = False


class Slot:
    """One copy of one rank's state in memory owned by dpmpi (``epoch`` -1: holds nothing).
    ``lazy``: mapped only; its pages are locked (or faulted in) by ``settle()``, which whoever
    writes it first calls (a replacement's own slots: ``Buffers``)."""

    def __init__(self, nbytes: int, lock: bool, shift: int = 0, lazy: bool = False) -> None:
        ext = cext()
        locked, err = ext.ffi.new("int *"), ext.ffi.new("int *")
        size = max(nbytes, 1) + shift  # shift: where the bytes start in the first page (pageswap.shift_for)
        ptr = ext.lib.dpmpi_mem_map(size, err) if lazy else ext.lib.dpmpi_mem_alloc(size, int(lock), locked, err)
        if ptr == ext.ffi.NULL:
            raise MemoryError(f"dpmpi: cannot map {size} bytes for a snapshot slot ({os.strerror(err[0])})")
        self.lock, self.settled = lock, not lazy
        self._locked = [bool(locked[0])]  # (read by the unmapping too)
        self.shift, self.size = shift, size
        self.ptr = ext.ffi.gc(ext.ffi.cast("char *", ptr) + shift,
                              lambda p, n=size, k=self._locked: ext.lib.dpmpi_mem_free(p - shift, n, int(k[0])))
        self.nbytes = nbytes
        self.epoch = -1
        self.digest = 0
        self.hdr = ext.ffi.new("uint64_t[4]")  # epoch, nbytes, digest, owner: what a replica arrives with
        if not lazy:
            self._warn_unlocked(err[0])

    @property
    def locked(self) -> bool:
        return self._locked[0]

    def settle(self) -> None:
        """A lazy slot's pages locked, else faulted in, before it is first written (once)."""
        if self.settled:
            return
        ext = cext()
        locked, err = ext.ffi.new("int *"), ext.ffi.new("int *")
        ext.lib.dpmpi_mem_settle(self.ptr - self.shift, self.size, int(self.lock), locked, err)
        self._locked[0], self.settled = bool(locked[0]), True
        self._warn_unlocked(err[0])

    def _warn_unlocked(self, err: int) -> None:
        global _LOCK_WARNED
        if self.lock and not self.locked and not _LOCK_WARNED:
            _LOCK_WARNED = True
            warnings.warn(
                f"dpmpi: snapshot memory is not locked (mlock: {os.strerror(err)}); it works, but the OS may "
                f"page it out. Raise the limit (ulimit -l, or CAP_IPC_LOCK), or pass lock_memory=False to "
                f"silence this.", ResourceWarning, stacklevel=6)

    @property
    def address(self) -> int:
        """Where the slot's bytes start, as a number (another process of the node may read them)."""
        return int(cext().ffi.cast("uintptr_t", self.ptr))

    def relock(self) -> None:
        """Lock the slot's pages again after a page exchange unlocked them (``swap_pages``)."""
        if self.locked:
            cext().lib.dpmpi_pages_lock(self.ptr - self.shift, self.size, 1)  # (an error: unlocked, still works)

    def buffer(self, start: int = 0, stop: int | None = None) -> memoryview:
        stop = self.nbytes if stop is None else stop
        return memoryview(cext().ffi.buffer(self.ptr, max(self.nbytes, 1)))[start:stop]

    def part(self, entry: Any) -> memoryview:
        """The bytes of one layout entry (``dpmpi.snapshot.layout.Entry``) in this slot."""
        return self.buffer(entry.offset, entry.offset + entry.nbytes)

    def header_buffer(self) -> Any:
        return cext().ffi.buffer(self.hdr)

    @property
    def header_bytes(self) -> int:
        return cext().ffi.sizeof(self.hdr)

    def seal_header(self, owner: int | None = None) -> None:
        """Write this slot's epoch, length and checksum (and owner) into the header it is sent with."""
        self.hdr[0], self.hdr[1], self.hdr[2] = self.epoch, self.nbytes, self.digest
        if owner is not None:
            self.hdr[3] = owner


def helper_count() -> int:
    """How many CPUs the copy and replication threads have of their own (``DPMPI_HELPER_CPUS``)."""
    return int(cext().lib.dpmpi_snap_helper_count())


@functools.cache
def lock_unlimited() -> bool:
    """Whether this process may lock any amount of memory (RLIMIT_MEMLOCK unlimited, or
    CAP_IPC_LOCK): then the kernel's count of locked memory is never checked against a limit."""
    import resource

    if resource.getrlimit(resource.RLIMIT_MEMLOCK)[0] == resource.RLIM_INFINITY:
        return True
    try:
        with open("/proc/self/status") as f:
            caps = next((line.split()[1] for line in f if line.startswith("CapEff:")), "0")
        return bool(int(caps, 16) >> 14 & 1)  # CAP_IPC_LOCK
    except (OSError, ValueError):
        return False


def swap_pages(array: Any, in_slot: Any, nbytes: int, slot_locked: bool) -> bool:
    """Exchange whole pages of an array and its copy in a slot (``dpmpi_pages.c``); False: nothing
    was exchanged, the array's bytes there are unspecified (copy the slot's over them). A locked
    slot is unlocked first only where the kernel's count of locked memory is checked against a
    limit (moving a locked range adds to that count; unlocking 64 MiB costs ~2 ms here)."""
    unlock = slot_locked and not lock_unlimited()
    return cext().lib.dpmpi_pages_swap(array, in_slot, nbytes, int(unlock)) == 0


def segments(entries: tuple, base: Any) -> tuple[list, list]:
    """Pointers into a slot at ``base`` for each entry, and their lengths."""
    return [base + e.offset for e in entries], [e.nbytes for e in entries]


def pointers(views: list[memoryview]) -> list:
    ffi = cext().ffi
    return [ffi.from_buffer(v) for v in views]


def prefault(ptrs: list, views: list[memoryview]) -> None:
    """Fault the arrays' pages in, contents unchanged (arrays made by np.zeros and never written
    have no pages yet; copying into them ran at ~0.1 GB/s here)."""
    lib = cext().lib
    for ptr, v in zip(ptrs, views):
        lib.dpmpi_prefault(ptr, v.nbytes)  # an error (old kernel): the copy faults them


class Engine:
    """The C copy threads: one job at a time. Owner: the Snapshot that made it; its threads
    touch only the memory of the running job (never MPI) and end when it is freed."""

    def __init__(self, threads: int) -> None:
        ext = cext()
        raw = ext.lib.dpmpi_engine_new(threads)
        if raw == ext.ffi.NULL:
            raise RuntimeError(f"dpmpi: cannot start {threads} snapshot copy thread(s)")
        self.raw = ext.ffi.gc(raw, ext.lib.dpmpi_engine_free)
        self._keep: list = []
        self.stop_next_pull = False  # test hook (inject)

    def start(self, dst: list | None, src: list, lens: list[int], gate: Any = None) -> None:
        ext = cext()
        n = len(src)
        d = (ext.ffi.new("char *[]", [ext.ffi.NULL if p is None else ext.ffi.cast("char *", p) for p in dst])
             if dst is not None else ext.ffi.NULL)  # a None destination: that segment is only checksummed
        s = ext.ffi.new("char *[]", [ext.ffi.cast("char *", p) for p in src])
        ln = ext.ffi.new("size_t[]", lens)
        self._keep = [d, s, ln, dst, src]  # alive until the job ends
        rc = ext.lib.dpmpi_engine_start(self.raw, n, d, s, ln, 0, gate if gate is not None else ext.ffi.NULL)
        if rc != 0:
            raise RuntimeError(f"dpmpi: the snapshot copy engine refused a job (code {rc})")

    def pull(self, pid: int, dst: list[memoryview], src: list[int]) -> tuple[int, int]:
        """Read ``src`` (addresses in process ``pid``, on this node) into ``dst`` on the copy
        threads and this one (GIL released), checksumming what arrived: (0 or the engine's
        result code, the checksum). The caller knows that memory stays unchanged until this
        returns (``restore``: the holder waits in the restore's last collective)."""
        ext = cext()
        lens = [v.nbytes for v in dst]
        half, self.stop_next_pull = self.stop_next_pull, False
        if half:  # test hook: stop half-way
            ext.lib.dpmpi_engine_fail_after(self.raw, max(1, sum(lens) // 2))
        d = ext.ffi.new("char *[]", pointers(dst))
        s = ext.ffi.new("char *[]", [ext.ffi.cast("char *", a) for a in src])
        ln = ext.ffi.new("size_t[]", lens)
        self._keep = [d, s, ln, dst]
        try:
            rc = ext.lib.dpmpi_engine_pull(self.raw, pid, len(src), d, s, ln)
            if rc != 0:
                raise RuntimeError(f"dpmpi: the snapshot copy engine refused a pull (code {rc})")
            return self.wait()
        finally:
            if half:
                ext.lib.dpmpi_engine_fail_after(self.raw, 0)

    def pull_errno(self) -> int:
        """The errno of the last failed pull's read (0: none)."""
        return int(cext().lib.dpmpi_engine_pull_errno(self.raw))

    def inject(self, after_bytes: int, pull: bool) -> None:
        """Test hook: the next copy stops (half-writing a unit) after ``after_bytes`` (0: never);
        ``pull``: instead the next ``pull`` stops half-way."""
        self.stop_next_pull = pull
        cext().lib.dpmpi_engine_fail_after(self.raw, 0 if pull else after_bytes)

    def wait(self) -> tuple[int, int]:
        ext = cext()
        digest = ext.ffi.new("uint64_t *")
        rc = ext.lib.dpmpi_engine_wait(self.raw, digest)  # cffi releases the GIL
        self._keep = []
        return rc, int(digest[0])

    def checksum(self, src: list, lens: list[int]) -> int:
        self.start(None, src, lens)
        return self.wait()[1]

    def busy(self) -> bool:
        return bool(cext().lib.dpmpi_engine_busy(self.raw))

    def job(self) -> int:
        """The last job's number: a replication fed by that copy names it (``Replicator.start``)."""
        return int(cext().lib.dpmpi_engine_job(self.raw))
