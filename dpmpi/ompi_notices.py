"""Open MPI's notice that a death during start-up makes expected, told in one line instead.

A rank killed inside ``MPI_Init`` before it published its contact information leaves the others
without the name of its shared-memory segment. Each survivor whose first message goes to it
prints Open MPI's help block "A system call failed during shared memory initialization that
should not have.  It is likely that your MPI job will now either abort or experience
performance degradation", with ``System call: open(2)`` and no file name, ``No such file or
directory``; PRRTE adds "N more processes have sent help message help-opal-shmem-mmap.txt / sys
call fail". Seen in about 1 of 30-60 start-up kills, the job recovered right every time
(thirty-sixth session). dpmpi-run holds these notices until its launch ends: when a rank of the
launch had died before its ``MPI_Init`` returned, it writes one line saying what they were;
otherwise (no such death: a real problem) the notices as they came.

Any other line goes through as it came; a help block (between two lines of dashes) only once
it is complete, or after ``MAX_BLOCK`` lines (a line of dashes that opened none).

Owner and lifetime: one ``Notices`` per launch of dpmpi-run; ``write`` runs in its stderr pump
thread, ``finish`` in its main thread once the launch ended (the pump thread may still run:
``lock`` guards the state)."""
from __future__ import annotations

import re
import threading
from typing import Callable

MAX_BLOCK = 60  # lines of a help block held before it is taken for something else and let through
_RULE = re.compile(rb"^-{60,}\s*$")
_REPEATS = re.compile(rb"^(\d+) more process(?:es)? ha(?:s|ve) sent help message help-opal-shmem-\w+\.txt / sys call fail")
_NOTICE = b"A system call failed during shared memory initialization"


def is_dead_segment_notice(block: list[bytes]) -> bool:
    """An Open MPI help block saying that opening a peer's segment of no name failed. Pure."""
    text = b"".join(block)
    return (_NOTICE in text and b"No such file or directory" in text
            and any(re.match(rb"^\s*System call:\s*open\(2\)\s*$", line) for line in block))


class Notices:
    def __init__(self, out: Callable[[bytes | None], None]) -> None:
        self.out = out
        self.lock = threading.Lock()
        self.block: list[bytes] | None = None  # a help block being read
        self.held: list[bytes] = []  # the notices' lines, as they came
        self.processes = 0  # how many processes printed the notice

    def write(self, raw: bytes) -> None:
        """A line of mpirun's stderr meant for the user."""
        with self.lock:
            passing = self._take(raw)
        for line in passing:
            self.out(line)

    def _take(self, raw: bytes) -> list[bytes]:
        if self.block is None:
            repeats = _REPEATS.match(raw)
            if repeats:
                self.processes += int(repeats.group(1))
                self.held.append(raw)
                return []
            if _RULE.match(raw):
                self.block = [raw]
                return []
            return [raw]
        self.block.append(raw)
        closed = bool(_RULE.match(raw))
        if not closed and len(self.block) < MAX_BLOCK:
            return []
        block, self.block = self.block, None
        if closed and is_dead_segment_notice(block):
            self.held += block
            self.processes += 1
            return []
        return block

    def finish(self, death_during_start: bool) -> None:
        """The launch ended: write what was held, or one line for it after a death during start-up."""
        with self.lock:
            held, pending, processes = self.held, self.block or [], self.processes
            self.held, self.block, self.processes = [], None, 0
        if held and death_during_start:
            self.out(f"dpmpi-run: {processes} process(es) printed Open MPI's \"A system call failed during shared "
                     f"memory initialization ... open(2) ... No such file or directory\": the segment of a rank that "
                     f"died inside MPI_Init before it published it, expected after such a death (not shown)\n".encode())
            held = []
        for line in held + pending:
            self.out(line)
