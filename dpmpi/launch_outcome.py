"""What one launch of mpirun told dpmpi-run (``dpmpi.run``): the ranks' status records and the
lines of mpirun's stderr that say something about the launch itself, read by ``pump_stderr``.

Owner and lifetime: one ``Outcome`` per launch attempt; ``pump_stderr`` fills it in dpmpi-run's
stderr pump thread (each update one operation under the GIL), dpmpi-run's main thread reads it
while the launch runs (``init``) and once mpirun has ended and its stderr is read."""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field

from dpmpi import init_loss, node_loss, ompi_notices, setup_loss

# mpirun's message when its PMIx server could not start (a transient start-up failure)
STARTUP_FAILURE = "PMIx server's listener thread failed to start"
CANNOT_LAUNCH = "was unable to launch the specified application"  # (PRRTE: an executable it could not access)
STATUS_TAG = "[dpmpi-status] "


@dataclass
class Outcome:
    records: dict[int, dict] = field(default_factory=dict)
    startup_failed: bool = False  # mpirun itself failed to start (nothing of the program ran)
    unlaunchable: bool = False  # PRRTE could not start the program (its executable, on a node)
    lost: node_loss.LostDaemon = field(default_factory=node_loss.LostDaemon)  # a daemon PRRTE lost
    init: init_loss.InitWatch = field(default_factory=lambda: init_loss.InitWatch(0))  # deaths before MPI_Init
    marks: setup_loss.MarkWatch = field(default_factory=setup_loss.MarkWatch)  # commits, the program's repairs

    def add(self, record: dict) -> None:
        """The newest record of a rank wins, except that one from a process that did not
        initialise MPI (e.g. a shell around the program) never replaces one that did."""
        rank = record.get("rank", -1)
        if not isinstance(rank, int) or rank < 0:
            return
        old = self.records.get(rank)
        if old is not None and old.get("mpi", True) and not record.get("mpi", True):
            return
        self.records[rank] = record

    def note(self, line: str) -> bool:
        """Note what a line of mpirun's stderr says about the launch itself; False when the line
        is not for the user (PRRTE's error-manager trace that dpmpi-run asked for)."""
        if STARTUP_FAILURE in line:
            self.startup_failed = True
        if CANNOT_LAUNCH in line:
            self.unlaunchable = True
        return self.init.note(line) and self.lost.note(line) and self.marks.note(line)

    def setup_victim(self, n: int, code: int) -> int | None:
        """The rank whose death in the program's setup ended this launch, when launching the job
        again loses nothing (``dpmpi.setup_loss``); ``code``: the launch's exit code."""
        return setup_loss.setup_victim(n, self.records, self.init.formed, self.marks, self.init.died, code)


def to_stderr(raw: bytes) -> None:
    if hasattr(sys.stderr, "buffer"):
        sys.stderr.buffer.write(raw)
        sys.stderr.buffer.flush()
    else:
        sys.stderr.write(raw.decode("utf-8", "replace"))


def pump_stderr(stream, outcome: Outcome, held: init_loss.HeldStderr, notices: ompi_notices.Notices) -> None:
    """Copy mpirun's stderr to ours (through ``held``), taking the ranks' status records out.
    Runs in a thread of dpmpi-run (no MPI) until mpirun's stderr closes, or for ever when a
    process that inherited it lives on (a daemon's launcher on a node that went silent: see
    launch())."""
    for raw in iter(stream.readline, b""):
        if b"\0" in raw:  # (Open MPI's help messages end with a NUL byte: text tools then choke on stderr)
            raw = raw.replace(b"\0", b"")
            if not raw:
                continue
        if not raw.endswith(b"\n"):  # the stream's last bytes (PRRTE's "LAUNCHER JOB OBJECT NOT FOUND", seen
            raw += b"\n"  # after a spawn): ended, so that dpmpi-run's own line starts a line
        line = raw.decode("utf-8", "replace")
        if not outcome.note(line):
            held.tick()  # (a rank's MPI_Init returned: what was held goes out now)
            continue
        at = line.find(STATUS_TAG)
        if at >= 0:
            try:
                outcome.add(json.loads(line[at + len(STATUS_TAG) :]))
            except ValueError:
                pass
            before = line[:at].strip()
            if not before:
                continue
            raw = (before + "\n").encode()
        notices.write(raw)  # (then to held)
