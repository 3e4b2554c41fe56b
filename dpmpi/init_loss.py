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
  that died: ``errmgr:dvm: proc [JOB@1,RANK] aborted by signal``;
* a rank that died without its line, while another live rank has not written its own either,
  ``GRACE`` seconds later (the line of a rank that died just after its ``MPI_Init`` returned may
  reach dpmpi-run after PRRTE's trace), means the job is stuck in ``MPI_Init``.

Owner and lifetime: one ``InitWatch`` per launch attempt; ``note`` runs in dpmpi-run's stderr
pump thread, ``stuck`` in its main thread (sets and dicts of ints, each update one operation
under the GIL)."""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

INIT_TAG = "[dpmpi-init] "
GRACE = 2.0  # seconds between PRRTE's report of a death and dpmpi-run's verdict
_ABORTED = re.compile(r"errmgr:dvm: proc \[[^\]]*@1,(\d+)\] aborted by signal")  # @1: the program's job


@dataclass
class InitWatch:
    n: int  # the job's processes (ranks 0..n-1 of its MPI_COMM_WORLD)
    initialised: set[int] = field(default_factory=set)
    died: dict[int, float] = field(default_factory=dict)  # rank -> when PRRTE said it died

    def note(self, line: str) -> bool:
        """Note a line of mpirun's stderr; False when it is dpmpi's own (not for the user)."""
        at = line.find(INIT_TAG)
        if at >= 0:
            try:
                self.initialised.add(int(line[at + len(INIT_TAG):].split()[0]))
            except (ValueError, IndexError):
                return True
            return False
        dead = _ABORTED.search(line)
        if dead:
            self.died.setdefault(int(dead.group(1)), time.monotonic())
        return True

    def stuck(self, now: float | None = None) -> int | None:
        """A rank that died before its MPI_Init returned while a live rank is still inside its
        own (so the job can never get out of MPI_Init), or None."""
        now = time.monotonic() if now is None else now
        waiting = [r for r in range(self.n) if r not in self.initialised and r not in self.died]
        if not waiting:
            return None
        for rank, when in sorted(self.died.items()):
            if rank not in self.initialised and now - when >= GRACE:
                return rank
        return None

    def before_any_init(self) -> int | None:
        """A rank that died (by a signal, PRRTE says) while no rank's MPI_Init had returned: then
        no rank ran any of the program past MPI_Init, and launching the job again repeats nothing
        else (dpmpi-run does, ``DPMPI_START_RETRIES`` times). None otherwise."""
        if self.initialised or not self.died:
            return None
        return min(self.died, key=lambda r: self.died[r])

    def account(self, rank: int) -> str:
        return (f"rank {rank} died before its MPI_Init returned, and ranks still inside MPI_Init wait for it "
                f"for ever (Open MPI's start-up needs every process; nothing can be repaired before it): "
                f"dpmpi-run ended the job")
