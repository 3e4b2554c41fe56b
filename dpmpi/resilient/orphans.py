"""The processes that a dead rank leaves behind: its program's children (a ``multiprocessing``
pool's workers, a data loader's) outlive it, and while they run the job never ends: they hold
the output pipes of the launcher's daemon on their node, so the launcher waits for them after
every rank has finished (seen: a rank whose pool worker or helper child outlived it, SIGKILLed
from outside or ended by the stall watchdog; the job completed, every result right, then hung
until its time limit; thirty-fifth session, ``tests/programs/orphan_child.py``).

Open MPI's launcher starts each rank as the leader of its own process group, and a child
inherits the group. After each repair, every process ends the groups of the dead processes of
its own node (same kernel, same pid namespace) with SIGKILL. Only the dead process's group is
hit: while a process group has members, its number is never given to a new process (POSIX), so
a group named after a pid that is gone, or a zombie with the dead process's start time, is that
process's; and a group that a live process of the job on this node belongs to (a launcher
that puts several ranks in one group) is left alone. (A child that made its own group or
session, e.g. ``start_new_session=True``, is not reached; the race between the check and the
signal, a new process given that pid and making itself a group leader within microseconds, is
not closed.)

Owner: the main thread, at the end of each repair (``dpmpi.resilient.repair.commit``)."""
from __future__ import annotations

import os
import signal
from typing import Iterable

from dpmpi.watchplan import Ident, same_pid_space


def on_my_node(procs: dict[int, Ident], me: int, dead: Iterable[int]) -> list[Ident]:
    """The identities of the processes among ``dead`` that ran on this process's node and pid
    namespace (``same_pid_space``: their pids mean the same here). Pure."""
    return [procs[p] for p in same_pid_space(procs, me, dead) if procs[p].pid > 1]


def gone(ident: Ident, stat: str | None) -> bool:
    """Whether the process ``ident`` no longer runs: ``stat``, the text of /proc/PID/stat now
    (None: no such pid), names no process, or that process as a zombie (state Z, the same start
    time). A live process there, the same or one that took its pid, is not gone. Pure."""
    if stat is None:
        return True
    fields = stat[stat.rfind(")") + 2:].split()  # (the command name may hold spaces and parentheses)
    try:
        state, start = fields[0], int(fields[19])
    except (IndexError, ValueError):
        return False
    return state == "Z" and start == ident.start


def _stat(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read()
    except OSError:
        return None


def end_groups(dead: list[Ident], live: list[int]) -> list[int]:
    """SIGKILL to the process group of each dead process that is gone (``gone``) and that no live
    process of the job (``live``: pids on this node, this one's included) belongs to (a launcher
    that put several ranks in one group); returns the groups that had members left. Local;
    never raises."""
    ended = []
    groups = set()
    for pid in live:
        try:
            groups.add(os.getpgid(pid))
        except OSError:
            pass
    for ident in dead:
        if ident.pid in groups or not gone(ident, _stat(ident.pid)):
            continue
        try:
            os.killpg(ident.pid, signal.SIGKILL)
            ended.append(ident.pid)
        except OSError:  # (no such group: nothing left behind; or not ours)
            pass
    return ended
