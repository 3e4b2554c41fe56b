"""Snapshot files: every K-th committed epoch written to disk in the background (one file per
rank, the newest two kept), the fallback when in-memory copies are lost, and ``load`` for a
job that restarts from disk.

A file is one JSON header line (magic, epoch, rank, checksum, bytes, layout signature, job tag)
and the slot's bytes. Its name carries a tag, the job's (``dpmpi.jobid``) and the Snapshot's
(``snapshot_tag``): a Snapshot prunes and restores only its own files, so that a directory an
earlier job, or an earlier Runtime of this job, used is never taken for its own (before the
fifty-first session a job went on from another's newer epoch, silently); ``load`` (a restart)
takes the files of these arrays that the Snapshot that wrote last left. Files from before the
tags (no tag in the name) are read by ``load`` only.

Owner of the writer thread: the ``Persistence`` of one Snapshot; the thread reads one committed
slot (never MPI), which is not staged into until it is joined.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import threading
from typing import Any, Callable, Mapping

from mpi4py import MPI

from dpmpi import jobid
from dpmpi.mpicall import exchange
from dpmpi.errors import from_mpi
from dpmpi.snapshot.errors import SnapshotLostError
from dpmpi.snapshot.layout import Entry, layout, signature, view
from dpmpi.snapshot.native import Engine, Slot, cext

FILE_MAGIC = "dpmpi-snapshot-2"  # 2: large arrays at 4 KiB offsets (layout.PAGE_ALIGN)


def file_name(directory: str, rank: int, epoch: int, tag: str = "") -> str:
    return os.path.join(directory, f"rank{rank:05d}.epoch{epoch:010d}" + (f".{tag}" if tag else "") + ".dpmpi")


_NAME = re.compile(r"rank(\d+)\.epoch(\d+)(?:\.([0-9a-f]{16}))?\.dpmpi")


def disk_files(directory: str, rank: int, entries: tuple[Entry, ...]) -> list[tuple[int, str, float]]:
    """(epoch, tag or "", modification time) of each file ``directory`` holds for ``rank`` with
    the arrays of ``entries`` (another Snapshot's files, of other arrays, are not candidates)."""
    out, mine = [], signature(entries)
    for r, epoch, tag, name in _names(directory):
        if r == rank:
            path = os.path.join(directory, name)
            try:
                with open(path, "rb") as f:
                    if json.loads(f.readline()).get("layout") != mine:
                        continue
                out.append((epoch, tag, os.stat(path).st_mtime))
            except (OSError, ValueError):  # (removed meanwhile, or not a snapshot file: load says so)
                pass
    return sorted(out)


def disk_epochs(directory: str, rank: int, tag: str) -> list[int]:
    """The epochs of ``rank`` that ``directory`` holds from the job tagged ``tag``, oldest first
    (from the names alone: a restore's agreement lists them on every rank)."""
    return sorted(epoch for r, epoch, t, _n in _names(directory) if r == rank and t == tag)


def beyond(directory: str, size: int) -> set[tuple[int, str]]:
    """The (epoch, job tag) of the files ``directory`` holds for ranks ``size`` and above."""
    return {(epoch, tag) for r, epoch, tag, _n in _names(directory) if r >= size}


def _names(directory: str) -> list[tuple[int, int, str, str]]:
    """(rank, epoch, job tag or "", name) of each snapshot file in ``directory``."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    out = []
    for name in names:
        m = _NAME.fullmatch(name)
        if m is not None:
            out.append((int(m.group(1)), int(m.group(2)), m.group(3) or "", name))
    return out


def newest_common(lists: list[list[tuple[int, str, float]]]) -> tuple[int, str] | None:
    """Of every rank's files (``disk_files``), the newest epoch that every rank holds from the
    job that wrote last (the tag with the latest file among those with such an epoch); None when
    no tag has an epoch common to all ranks. Pure."""
    if not lists:
        return None
    common = set.intersection(*({(e, t) for e, t, _m in files} for files in lists))
    if not common:
        return None
    latest: dict[str, float] = {}
    for files in lists:
        for _e, t, mtime in files:
            latest[t] = max(latest.get(t, mtime), mtime)
    tag = max({t for _e, t in common}, key=lambda t: (latest[t], t))
    return max(e for e, t in common if t == tag), tag


def load_file(path: str, arrays: Mapping[str, Any], entries: tuple[Entry, ...], engine: Engine) -> None:
    """Read a snapshot file into ``arrays`` and verify its checksum."""
    ext = cext()
    with open(path, "rb") as f:
        header = json.loads(f.readline())
        if header.get("magic") == "dpmpi-snapshot-1":
            raise ValueError(f"{path} was written by an older dpmpi (file format 1, another layout); "
                             f"load it with the dpmpi that wrote it")
        if header.get("magic") != FILE_MAGIC:
            raise ValueError(f"{path} is not a dpmpi snapshot file")
        if header["layout"] != signature(entries):
            raise ValueError(f"{path} holds arrays {header['layout']}, but {signature(entries)} are registered")
        for entry in entries:
            target = view(entry.name, arrays[entry.name]).cast("B")
            f.seek(len(json.dumps(header)) + 1 + entry.offset)
            if f.readinto(target) != entry.nbytes:
                raise ValueError(f"{path} is truncated (array {entry.name!r})")
    ptrs = [ext.ffi.from_buffer(view(e.name, arrays[e.name])) for e in entries]
    if engine.checksum(ptrs, [e.nbytes for e in entries]) != header["digest"]:
        raise SnapshotLostError(f"{path} failed its checksum: the file is corrupt", MPI.ERR_OTHER, (header["rank"],))


def load(raw: MPI.Intracomm, arrays: Mapping[str, Any], directory: str,
         allgather: Callable[[Any], list] | None = None) -> int:
    """Fill ``arrays`` from the newest epoch that ``directory`` holds for every rank of ``raw``
    with these arrays, from the Snapshot that wrote last, and return it (collective).
    ``allgather``: the exchange of the ranks' listings (default: ``raw``'s own). Snapshot.load
    on a ``dpmpi.Comm`` gives that communicator's, which the program's record (the prologue)
    answers on a replacement: a replacement runs the program from its start and loads again,
    and before the fifty-first session its allgather on ``raw`` waited for ever for survivors that
    were restoring (a job restarted from disk hung at its first death); now it gets the listings
    the survivors had, so it loads the same epoch they did."""
    if not isinstance(raw, MPI.Intracomm):
        raise TypeError(f"Snapshot.load needs a dpmpi.Comm or an mpi4py Intracomm, got {type(raw).__name__}")
    entries = layout(dict(arrays))
    rank = raw.Get_rank()
    size = raw.Get_size()
    mine = (disk_files(directory, rank, entries), beyond(directory, size))
    try:
        gathered = allgather(mine) if allgather is not None else exchange(lambda: raw.allgather(mine))
    except MPI.Exception as exc:
        raise from_mpi(exc, raw, "Snapshot.load") from exc
    lists = [files for files, _b in gathered]
    found = newest_common(lists)
    if found is not None and any(found in more for _f, more in gathered):
        raise ValueError(f"{directory} holds epoch {found[0]} for more ranks than the {size} of this job (a job "
                         f"of another size wrote it): load it with as many ranks as wrote it")
    if found is None:
        missing = [r for r, x in enumerate(lists) if not x]
        raise SnapshotLostError(f"{directory} holds no epoch of these arrays common to all {len(lists)} ranks "
                                f"(ranks without any such file: {missing}; files of other arrays are not "
                                f"candidates)", MPI.ERR_OTHER, tuple(missing))
    epoch, tag = found
    load_file(file_name(directory, rank, epoch, tag), dict(arrays), entries, Engine(1))
    return epoch


_MADE = itertools.count(1)  # the Snapshots with a persist_dir made in this process, in order (main thread)


def snapshot_tag(job: str, k: int) -> str:
    """The tag of the files of the ``k``-th Snapshot with a ``persist_dir`` that a process of job
    ``job`` made: the job's own for the first, one derived from it for the others. A replacement
    runs the program from its start, so its k-th is the dead rank's k-th. Two ``Runtime``s one
    after the other on one directory (a training's phases) shared the job's tag in the
    fifty-first session's first fix: the second pruned its own files and its disk fallback
    restored the first's last epoch (the job ended with another result, exit code 0). Pure."""
    return job if k == 1 else hashlib.sha256(f"{job}:{k}".encode()).hexdigest()[:16]


class Persistence:
    """Writes committed slots of one Snapshot to ``directory`` every ``every`` epochs
    (``directory`` None: never)."""

    def __init__(self, directory: str | None, every: int) -> None:
        self.directory = directory
        self.every = every
        # the files it writes, prunes and restores: this job's and this Snapshot's (snapshot_tag)
        self.tag = snapshot_tag(jobid.tag(), next(_MADE)) if directory is not None else ""
        self._writer: threading.Thread | None = None
        self._writer_slot: Slot | None = None
        self._writer_error: BaseException | None = None

    def due(self, epoch: int) -> bool:
        return self.directory is not None and epoch % self.every == 0

    def epochs(self, rank: int) -> list[int]:
        return [] if self.directory is None else disk_epochs(self.directory, rank, self.tag)

    def write(self, slot: Slot, rank: int, entries: tuple[Entry, ...]) -> None:
        """Write ``slot`` (committed) in the background; an error is raised by the next ``join``."""
        self.join()
        directory = self.directory
        assert directory is not None
        header = {"magic": FILE_MAGIC, "epoch": slot.epoch, "rank": rank, "digest": slot.digest,
                  "nbytes": slot.nbytes, "layout": signature(entries), "job": self.tag}
        path, tag = file_name(directory, rank, slot.epoch, self.tag), self.tag

        def write() -> None:
            try:
                tmp = path + f".tmp{os.getpid()}"
                with open(tmp, "wb") as f:
                    f.write((json.dumps(header) + "\n").encode())
                    f.write(slot.buffer())
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
                for old in disk_epochs(directory, rank, tag)[:-2]:  # keep this job's newest two
                    try:
                        os.unlink(file_name(directory, rank, old, tag))
                    except OSError:
                        pass
            except BaseException as exc:  # reported on the main thread at the next join
                self._writer_error = exc

        self._writer_slot = slot
        self._writer = threading.Thread(target=write, name="dpmpi-persist", daemon=True)
        self._writer.start()

    def join_if_writing(self, slot: Slot) -> None:
        """Wait for the writer if it reads ``slot`` (before the slot is written again)."""
        if self._writer_slot is slot:
            self.join()

    def join(self) -> None:
        if self._writer is not None:
            self._writer.join()
            self._writer, self._writer_slot = None, None
        if self._writer_error is not None:
            exc, self._writer_error = self._writer_error, None
            raise OSError(f"dpmpi: writing a snapshot file to {self.directory} failed: {exc}") from exc

    def read(self, rank: int, epoch: int, arrays: Mapping[str, Any], entries: tuple[Entry, ...],
             engine: Engine) -> None:
        assert self.directory is not None
        load_file(file_name(self.directory, rank, epoch, self.tag), arrays, entries, engine)
