"""The background committer: ``stage(epoch)`` seals and replicates the copy as soon as it is
done, and ``restore(swap=True)`` refills the own copy and re-replicates it, on one thread for the
Snapshot's life (starting one per stage cost ~1.8 ms here: Thread.start waits until the new
thread runs).

Owner and lifetime: the Snapshot that made it; the thread runs one job at a time (a job may
start a replication, under the replication's ``mpi_lock``), and ends at ``close``. The
program's thread waits for each with ``join``.
"""
from __future__ import annotations

import queue
import threading
from typing import Callable


class Committer:
    """Runs commits (and refills) in the background, one at a time."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._queue: queue.SimpleQueue | None = None
        self.pending: tuple[int, threading.Event] | None = None  # the epoch being committed
        self._error: BaseException | None = None

    @property
    def started(self) -> bool:
        return self._thread is not None

    def running(self) -> bool:
        """Whether a submitted job has not ended yet (does not block)."""
        pending = self.pending
        return pending is not None and not pending[1].is_set()

    def submit(self, epoch: int, job: Callable[[int], None]) -> None:
        """Run ``job(epoch)`` in the background. The thread, started by the first call, keeps that
        first job (and what it belongs to: the Snapshot, for a commit) alive until ``close``."""
        if self._thread is None:
            self._queue = queue.SimpleQueue()
            self._thread = threading.Thread(target=self._run, args=(job,), name="dpmpi-commit", daemon=True)
            self._thread.start()
        done = threading.Event()
        self.pending = (epoch, done)
        self._queue.put((epoch, done, job))

    def _run(self, _first: Callable[[int], None]) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            epoch, done, job = item
            try:
                job(epoch)
            except BaseException as exc:  # given to the program by join()
                self._error = exc
            finally:
                del job, item
                done.set()

    def join(self) -> tuple[int, BaseException | None] | None:
        """Wait for the pending commit; (its epoch, its error) or None if there was none."""
        if self.pending is None:
            return None
        epoch, done = self.pending
        done.wait()
        self.pending, error, self._error = None, self._error, None
        return epoch, error

    def close(self) -> None:
        self.join()
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
