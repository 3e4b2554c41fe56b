"""What dpmpi-run does about a death in a program's setup that the job could not repair.

dpmpi repairs a death in the setup's collectives on the communicator ``dpmpi.init()`` returned
(and in its ``Split``\\ s) and hands a replacement the survivors' results; other calls there
cannot be redone with a replacement: point-to-point messages that a death cut short, receives
from ``ANY_SOURCE``, non-blocking collectives, a death in a derived communicator's collective
with the ``Runtime`` made after the setup (docs/spares.md). Such a death ended the job: the
survivors raised ``ProcFailedError`` (or a replacement ``ReplayError``) and dpmpi-run exited 1,
although no work was lost yet. Now dpmpi-run launches the job again, within
``DPMPI_START_RETRIES`` (the budget of its other launches again), when all of this holds:

* the launch failed: its exit code (``dpmpi.exit_code``) is not 0, or a live rank ended with an
  error (below) that the others shrank around and completed without (policy ``shrink``: a job of
  fewer ranks than asked, whose exit code said 0 or 1 by the wording of the ranks' errors; seen
  in CI, the same run as the one below, with exit code 0);
* the program is a dpmpi program: a rank came out of ``dpmpi.init``'s formation of the job
  (``[dpmpi-formed]``, ``dpmpi.init_loss``), so its ranks write the line below;
* a rank died by a signal (no status record): a fault, not the program's own error;
* no rank had committed a snapshot when the last of those died: each rank writes
  ``[dpmpi-committed] RANK`` on stderr at its first successful ``commit`` (``dpmpi.init_mark``;
  ``dpmpi.Runtime`` commits at the start of its first run), which dpmpi-run keeps to itself, and
  PRRTE's error-manager trace (``dpmpi.init_loss``) says when each death was reported. Nothing a
  recovery could resume from existed then, so launching again loses nothing that a repair would
  have kept. (Seen: rank 2 killed in a setup's ``Sendrecv``, its neighbours ended by the
  program's ``ProcFailedError``, and rank 0 and the spare went on as a job of two ranks,
  policy ``shrink``, committing snapshots of a setup made for four: exit code 1. A death
  reported without its time counts as after any commit.) A commit just before the death
  whose line reached dpmpi-run after the death's report is taken as after it: the job is
  launched again and that commit's work is done again;
* every other rank that failed ended with an error a death causes (``FAILURE_CAUSES``); one
  that ended with any other error (a bug in the setup, ``sys.exit(3)``) is the program's, and
  the job is not launched again;
* the program does not repair by itself: no rank's program called ``Respawn`` or ``Shrink``
  (``[dpmpi-repairs] RANK``, written at its first such call: ``dpmpi.init_mark``). Such a
  program has its own answer to a death (policy "abort" when spares run out, a loop that
  shrinks), which dpmpi-run leaves to it, and may never snapshot; a program without snapshots
  that leaves repairs to dpmpi is launched again whenever a death ends it.

A rank that dies in the setup in two launches in a row is taken for the program's own crash,
as dpmpi-run does for a death before ``MPI_Init`` returned. What the program did before the
death (files it wrote, lines it printed) is done again. Pure functions and one small class.

Owner and lifetime: one ``MarkWatch`` per launch attempt, in dpmpi-run's ``Outcome``; ``note``
runs in dpmpi-run's stderr pump thread, its sets are read in its main thread once mpirun has
ended and its stderr is read (a set of ints, each update one operation under the GIL)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from dpmpi.exit_code import REPAIR_DEADLINE, STUCK_CREATION

COMMITTED_TAG = "[dpmpi-committed] "
REPAIRS_TAG = "[dpmpi-repairs] "  # the program called Respawn or Shrink itself (dpmpi.init_mark)
# in a failed rank's status record: errors that a peer's death causes (dpmpi's, mpi4py's own for a
# call on a communicator that is not dpmpi's, a replacement's, Open MPI's abort after a failure,
# dpmpi's repair deadline, a creation that a death left stuck inside Open MPI)
FAILURE_CAUSES = ("ProcFailedError", "RevokedError", "ReplayError", "SparesDepletedError", "MPI_ERR_PROC_FAILED",
                  "MPI_ERR_REVOKED", "the MPI library aborted", REPAIR_DEADLINE, STUCK_CREATION)


@dataclass
class MarkWatch:
    """The ranks that said they committed a snapshot in this launch (and when the first said it),
    and those whose program said it repairs by itself."""

    committed: set[int] = field(default_factory=set)
    first: float | None = None  # (time.monotonic(), as init_loss.InitWatch.died)
    repairs: set[int] = field(default_factory=set)

    def note(self, line: str) -> bool:
        """Note a line of mpirun's stderr; False when it is dpmpi's own (not for the user)."""
        for tag, ranks in ((COMMITTED_TAG, self.committed), (REPAIRS_TAG, self.repairs)):
            at = line.find(tag)
            if at < 0:
                continue
            try:
                ranks.add(int(line[at + len(tag):].split()[0]))
            except (ValueError, IndexError):
                return True
            if tag is COMMITTED_TAG and self.first is None:
                self.first = time.monotonic()
            return False
        return True


def failure_caused(cause: object) -> bool:
    """Whether a failed rank's recorded cause is an error that a peer's death causes."""
    text = str(cause or "")
    return any(mark in text for mark in FAILURE_CAUSES)


def setup_victim(n: int, records: dict[int, dict], formed: set[int], marks: MarkWatch, died: dict[int, float],
                 code: int) -> int | None:
    """The rank whose death in the setup ended this launch, when launching again loses nothing
    (see the module); None otherwise. ``records``: the ranks' status records; ``formed``: the
    ranks that came out of dpmpi.init's formation; ``marks``: the ranks' commits and own repairs;
    ``died``: when PRRTE reported each death; ``code``: the launch's exit code."""
    first_commit = marks.first
    failed = [rec for rec in records.values() if rec.get("status") != 0]
    if (code == 0 and not failed) or not formed or marks.repairs:
        return None
    killed = [r for r in range(n) if r not in records]  # (no status: killed by a signal)
    if not killed:
        return None
    if first_commit is not None and any(died.get(r, first_commit) >= first_commit for r in killed):
        return None
    if not all(failure_caused(rec.get("cause")) for rec in failed):
        return None
    return killed[0]


def account(rank: int, relaunched: int, relaunches: int) -> str:
    return (f"rank {rank} died in the program's setup, before any rank had committed a snapshot, and the job could "
            f"not repair it there (the other ranks' errors above): nothing is lost by starting again, so "
            f"dpmpi-run launches the job again, {relaunched} of {relaunches} (DPMPI_START_RETRIES)")
