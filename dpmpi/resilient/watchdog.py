"""The repair deadline: a repair stuck inside MPI ends its process as a failure."""
from __future__ import annotations

import contextlib
import faulthandler
import sys
import threading
import time
from typing import Iterator

from dpmpi import _guard
from dpmpi.exit_code import REPAIR_DEADLINE


class Watchdog:
    """Bounds a repair: a Respawn that a further failure leaves stuck inside MPI (seen: every
    survivor inside Shrink's agreement, forever, when a peer's exit was never reported as a
    failure) ends this process as a failure after ``DPMPI_REPAIR_TIMEOUT`` seconds, with a status
    record, instead of hanging the job. (Ishrink, which would let the caller poll, fails with
    ERR_INTERN on a revoked communicator in Open MPI 5.0.11.)

    Owner and lifetime: one daemon thread per process, started by the first repair, never
    touches MPI; it sleeps on a condition until a deadline is armed, and only acts if that
    deadline passes before the repair disarms it."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._deadline: float | None = None
        self._what = ""
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def armed(self, seconds: float, what: str) -> Iterator[None]:
        with self._cv:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="dpmpi-repair-watchdog", daemon=True)
                self._thread.start()
            self._deadline, self._what = time.monotonic() + seconds, f"{what} did not complete within {seconds:g} s"
            self._cv.notify()
        try:
            yield
        finally:
            with self._cv:
                self._deadline = None

    def _run(self) -> None:
        while True:
            with self._cv:
                if self._deadline is None:
                    self._cv.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._cv.wait(left)
                    continue
                self._deadline, what = None, self._what
            # where each thread was stuck (the main thread: inside which MPI call of the repair)
            faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
            # (does not return; dpmpi-run's exit code reads the cause)
            _guard.die(1, f"{what} {REPAIR_DEADLINE}; a further failure left it stuck")


WATCHDOG = Watchdog()  # the process's one (repairs run one at a time, in the main thread)
