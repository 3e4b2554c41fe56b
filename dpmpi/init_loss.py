"""What dpmpi-run does about a rank that dies before it has initialised MPI.

``MPI_Init`` ends with a PMIx fence over every process of the job. Under ``--with-ft ulfm``
PRRTE does not end the job when a process dies, so if one dies before its ``MPI_Init`` returned,
every other rank waits in that fence for ever (seen: a stranger's job killed ~1 s in, on this
2-core machine, hung until its timeout; ``DPMPI_FAULTS=1:time@0.05:KILL``). Nothing can be
repaired before MPI is initialised, so dpmpi-run ends such a job and says why:

* each rank writes ``[dpmpi-init] RANK`` to stderr once its ``MPI_Init`` returned (a Python
  rank through ``dpmpi.init_mark``, any other through the exit guard's ``MPI_Init`` in
  libdpmpi_guard.so); dpmpi-run keeps that line from the user;
* PRRTE's error-manager trace, which dpmpi-run asks for anyway (``node_loss``), names a process
  that died: ``errmgr:dvm: proc [JOB@1,RANK] aborted by signal``, and one that ended by itself
  (``called abort``, ``exited with non-zero status``: e.g. its ``MPI_Init`` failed after a
  peer's death), which is not waiting in ``MPI_Init`` either;
* a rank that died without its line, while another live rank has not written its own either,
  ``GRACE`` seconds later (the line of a rank that died just after its ``MPI_Init`` returned may
  reach dpmpi-run after PRRTE's trace), means the job is stuck in ``MPI_Init``. (Before the
  thirty-seventh session a rank whose ``MPI_Init`` aborted counted as waiting: a job whose
  other ranks had formed without the two, and would have ended right, was ended.)

Owner and lifetime: one ``InitWatch`` per launch attempt; ``note`` runs in dpmpi-run's stderr
pump thread, ``stuck`` in its main thread (sets and dicts of ints, each update one operation
under the GIL)."""
from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

INIT_TAG = "[dpmpi-init] "
FORMING_TAG = "[dpmpi-forming] "  # a rank entered dpmpi.init's formation of the job (dpmpi.init_mark)
FORMED_TAG = "[dpmpi-formed] "  # ... and came out of it
GRACE = 2.0  # seconds between PRRTE's report of a death and dpmpi-run's verdict
HOLD_S = 10.0  # seconds after a launch during which its stderr is held back until a rank has initialised
# seconds dpmpi-run gives mpirun to end a launch it found stuck before it SIGKILLs it: seen, prterun itself
# stuck on a mutex in PRRTE's event loop after ranks aborted in MPI_Init, SIGTERM never handled
KILL_GRACE = 5.0
_ABORTED = re.compile(r"errmgr:dvm: proc \[[^\]]*@1,(\d+)\] aborted by signal")  # @1: the program's job
# a rank that ended by itself: its MPI_Init failed (e.g. "unable to reach each other" after a peer's
# death) and aborted, or the program exited before its MPI_Init returned
_ENDED = re.compile(r"errmgr:dvm: proc \[[^\]]*@1,(\d+)\] (?:called abort|exited with non-zero status)")


@dataclass
class InitWatch:
    n: int  # the job's processes (ranks 0..n-1 of its MPI_COMM_WORLD)
    initialised: set[int] = field(default_factory=set)
    died: dict[int, float] = field(default_factory=dict)  # rank -> when PRRTE said it died
    forming: dict[int, float] = field(default_factory=dict)  # rank -> when it entered the formation
    formed: set[int] = field(default_factory=set)
    ended: set[int] = field(default_factory=set)  # ranks that ended by themselves (not waiting in MPI_Init)

    def note(self, line: str) -> bool:
        """Note a line of mpirun's stderr; False when it is dpmpi's own (not for the user)."""
        for tag in (INIT_TAG, FORMING_TAG, FORMED_TAG):
            at = line.find(tag)
            if at < 0:
                continue
            try:
                rank = int(line[at + len(tag):].split()[0])
            except (ValueError, IndexError):
                return True
            if tag is INIT_TAG:
                self.initialised.add(rank)
            elif tag is FORMING_TAG:
                self.forming.setdefault(rank, time.monotonic())
            else:
                self.formed.add(rank)
            return False
        dead = _ABORTED.search(line)
        if dead:
            self.died.setdefault(int(dead.group(1)), time.monotonic())
        ended = _ENDED.search(line)
        if ended:
            self.ended.add(int(ended.group(1)))
        return True

    def stuck(self, now: float | None = None) -> int | None:
        """A rank that died before its MPI_Init returned while a live rank is still inside its
        own (so the job can never get out of MPI_Init), or, with every rank gone, ``KILL_GRACE``
        seconds more after that death (mpirun then ends by itself, unless it is stuck itself:
        seen, prterun on a mutex in PRRTE's event loop after the others aborted in MPI_Init,
        and dpmpi-run waited for it for ever; forty-second session); or None."""
        now = time.monotonic() if now is None else now
        waiting = [r for r in range(self.n) if r not in self.initialised and r not in self._gone()]
        if not waiting and not self._gone() >= set(range(self.n)):
            return None
        grace = GRACE if waiting else GRACE + KILL_GRACE
        for rank, when in sorted(self.died.items()):
            if rank not in self.initialised and now - when >= grace:
                return rank
        return None

    def called_init(self) -> bool:
        """Whether a rank entered ``dpmpi.init``'s formation of the job (which makes the spares)."""
        return bool(self.forming or self.formed)

    def _gone(self) -> set[int]:
        """The ranks PRRTE said died or ended by themselves."""
        return self.died.keys() | self.ended

    def died_in_start(self) -> bool:
        """Whether a rank died or ended before its MPI_Init returned (as far as dpmpi-run knows)."""
        return any(r not in self.initialised for r in self._gone())

    def before_any_init(self) -> int | None:
        """A rank that died (by a signal, PRRTE says) while no rank's MPI_Init had returned: then
        no rank ran any of the program past MPI_Init, and launching the job again repeats nothing
        else (dpmpi-run does, ``DPMPI_START_RETRIES`` times). None otherwise."""
        if self.initialised or not self.died:
            return None
        return min(self.died, key=lambda r: self.died[r])

    def stuck_forming(self, timeout: float, now: float | None = None) -> int | None:
        """The job's formation (``dpmpi.init``) is stuck: every rank entered it or died, none came
        out, and ``timeout`` seconds passed since the last of those (once every process is in
        it, it takes milliseconds). Seen after a death during start-up, inside Open MPI: the
        survivors in the formation's ``Shrink`` or in an ``Allreduce`` that the death never
        failed, for ever (docs/limitations.md). Returns a rank that PRRTE said died, else -1;
        None when not stuck (``timeout`` 0: never)."""
        if timeout <= 0 or self.formed or not self.forming:
            return None
        if any(r not in self.forming and r not in self._gone() for r in range(self.n)):
            return None  # (a rank still starting, however slowly: the formation waits for it)
        now = time.monotonic() if now is None else now
        if now - max([*self.forming.values(), *self.died.values()]) < timeout:
            return None
        return min(self.died, key=lambda r: self.died[r]) if self.died else -1

    def account(self, rank: int) -> str:
        return (f"rank {rank} died before its MPI_Init returned, and ranks still inside MPI_Init wait for it "
                f"for ever (Open MPI's start-up needs every process; nothing can be repaired before it): "
                f"dpmpi-run ended the job")


class HeldStderr:
    """mpirun's stderr, held back while no rank's ``MPI_Init`` has returned (for at most
    ``HOLD_S``, unless a rank died before its own returned): if a death then ends the launch and
    dpmpi-run launches the job again, what the ended launch wrote (Open MPI's account of its
    failed start-up) is dropped, not shown as if the job had failed; otherwise it is written out,
    in order, as soon as a rank has initialised, the time is up, or the launch ended. (A launch
    whose ranks aborted in MPI_Init after a death can take more than HOLD_S to end: seen once in
    10 runs with two kills, its account was shown, then the job was launched again.)

    Owner and lifetime: one per launch; ``write`` runs in dpmpi-run's stderr pump thread,
    ``tick``, ``release`` and ``drop`` in its main thread. ``lines`` is guarded by ``lock``; the
    output by ``out_lock`` (held while writing, so held lines go out before newer ones), which
    ``tick`` only tries: the main thread never waits on a slow reader of stderr while the job
    runs (it has a job to watch and signals to pass on)."""

    def __init__(self, watch: InitWatch, out: Callable[[bytes], None], hold_s: float = HOLD_S) -> None:
        self.watch, self.out = watch, out
        self.until = time.monotonic() + hold_s
        self.lock = threading.Lock()
        self.out_lock = threading.Lock()
        self.lines: list[bytes] | None = []  # None: passing through

    def write(self, raw: bytes | None) -> None:
        """A line for the user (None: nothing, only check whether to stop holding)."""
        with self.out_lock:
            self._write(raw)

    def tick(self) -> None:
        """Stop holding if it is time (main thread: skipped while the pump thread writes)."""
        if self.out_lock.acquire(blocking=False):
            try:
                self._write(None)
            finally:
                self.out_lock.release()

    def release(self) -> None:
        """The launch ended and is not launched again: write out what is held."""
        with self.out_lock:
            with self.lock:
                pending, self.lines = self.lines or [], None
            for raw in pending:
                self.out(raw)

    def drop(self) -> int:
        """The launch ended and the job is launched again: forget what is held; how many lines."""
        with self.lock:
            n = len(self.lines or [])
            self.lines = None
            return n

    def _write(self, raw: bytes | None) -> None:  # (out_lock held)
        with self.lock:
            pending: list[bytes] = []
            # (past the hold's time, still held once a rank died before its MPI_Init returned: that
            # launch is ending, and dpmpi-run's verdict comes later than HOLD_S when it ends slowly)
            late = time.monotonic() >= self.until and not self.watch.died_in_start()
            if self.lines is not None and (self.watch.initialised or late):
                pending, self.lines = self.lines, None
            if raw is not None and self.lines is not None:
                self.lines.append(raw)
                return
        for line in pending:
            self.out(line)
        if raw is not None:
            self.out(raw)


def formation_account(rank: int | None, timeout: float, relaunched: int = 0, relaunches: int = 0) -> str:
    """dpmpi-run's line for a launch whose formation was stuck: launched again (the
    ``relaunched``-th time of ``relaunches``), or, 0, ended."""
    who = f"rank {rank} died during the job's start-up and " if rank is not None and rank >= 0 else ""
    again = (f"launching the job again, {relaunched} of {relaunches} (DPMPI_START_RETRIES)" if relaunched
             else "dpmpi-run ended the job")
    return (f"{who}the job's formation (dpmpi.init) did not complete within {timeout:g} s of every rank "
            f"entering it (Open MPI's start-up is not fault tolerant; DPMPI_FORM_TIMEOUT): {again}")
