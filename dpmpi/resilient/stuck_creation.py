"""An intercommunicator's creation stuck inside Open MPI after a death: its process ends as a failure.

Open MPI 5.0.11 can keep a process inside its activation of a new intercommunicator
(``Create_intercomm``, ``Merge``) for ever when a member of it dies there (docs/limitations.md:
no revoke reaches the process). The others then waited for it in the repair's ``Shrink`` until
their repair deadline ended them, and the process itself never ended: the job hung for good
(``bench/strangers/intercomm_per_step.py 200`` with rank 0 or 3 killed inside its fifth
activation, 2 of 4 runs). While a process is inside such a creation and its failure watcher has
noticed a death, ``CREATIONS`` ends it as a failure once half of ``DPMPI_REPAIR_TIMEOUT`` has
passed since the watch saw the notice: the others' ``Shrink`` then completes without it (their
own deadline is the whole of it), and the job recovers, shrinks or ends with an account instead
of hanging.

Owner and lifetime: one daemon thread per process, started at the first guarded creation; it
never calls MPI (it reads the watcher's notice, a C struct). The program's thread arms it around
the creation and disarms it after (one creation at a time: the program's thread makes them)."""
from __future__ import annotations

import contextlib
import faulthandler
import sys
import threading
import time
from typing import Callable, Iterator

from dpmpi import _guard, config, watcher
from dpmpi.exit_code import STUCK_CREATION as CAUSE

POLL_S = 0.1  # how often an armed watch reads the failure watcher's notice


def _noticed() -> bool:
    w = watcher.current()
    return w is not None and w.noticed()


class CreationWatch:
    """Ends this process when a guarded creation outlasts a noticed death by ``limit()``."""

    def __init__(self, noticed: Callable[[], bool] = _noticed,
                 limit: Callable[[], float] = lambda: config.get("DPMPI_REPAIR_TIMEOUT") / 2,
                 end: Callable[[str], None] = lambda why: _guard.die(1, why)) -> None:
        self._cv = threading.Condition()
        self._what: str | None = None
        self._armed = 0  # counts armings: a notice seen under one is not carried to the next
        self._thread: threading.Thread | None = None
        self._noticed, self._limit, self._end = noticed, limit, end

    @contextlib.contextmanager
    def guarded(self, what: str) -> Iterator[None]:
        with self._cv:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="dpmpi-creation-watch", daemon=True)
                self._thread.start()
            self._what = what
            self._armed += 1
            self._cv.notify()
        try:
            yield
        finally:
            with self._cv:
                self._what = None

    def _run(self) -> None:
        since, armed = 0.0, -1
        while True:
            with self._cv:
                while self._what is None:
                    self._cv.wait()
                if self._armed != armed:
                    since, armed = 0.0, self._armed
                what = self._what
            if not since and self._noticed():
                since = time.monotonic()
            limit = self._limit()
            if since and time.monotonic() - since > limit:
                with self._cv:
                    if self._what is None or self._armed != armed:
                        continue  # (the creation returned meanwhile)
                faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
                self._end(f"{what}: {CAUSE} {limit:g} s after a peer's death was noticed (half of "
                          f"DPMPI_REPAIR_TIMEOUT); a member's death there can keep it there for ever")
                return
            with self._cv:
                if self._what is not None and self._armed == armed:
                    self._cv.wait(POLL_S)


CREATIONS = CreationWatch()  # the process's one
