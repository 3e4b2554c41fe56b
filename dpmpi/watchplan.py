"""Who watches whom (pure decisions for dpmpi/watcher.py, the same on every process).

Each process's identity (``Ident``) is allgathered by ``dpmpi.init`` and by each spawn; from that
table every process decides, without talking to the others, which peers it watches with pidfds
and whether ULFM's own detection is watched too."""
from __future__ import annotations

from typing import Iterable, NamedTuple


class Ident(NamedTuple):
    """What a process tells the others about itself at init: enough to watch it with a pidfd."""

    kernel: str  # /proc/sys/kernel/random/boot_id (else the host name): one per running kernel
    pidns: tuple[int, int]  # (st_dev, st_ino) of /proc/self/ns/pid
    pid: int
    start: int  # start time in clock ticks (/proc/PID/stat field 22): tells a reused pid apart
    pidfd: bool  # this process can open pidfds
    wtid: int = 0  # kernel id of its watcher thread (0: none): peers watch that thread's end too
    nspace: str = ""  # its PMIx name (namespace, rank): peers tell their Open MPI of its death
    prank: int = -1


def same_pid_space(procs: dict[int, Ident], me: int, process_ids: Iterable[int]) -> list[int]:
    """The processes among ``process_ids`` (not ``me``) on ``me``'s kernel and pid namespace:
    their pids mean the same there. Pure."""
    mine = procs.get(me)
    if mine is None:
        return []
    return [w for w in process_ids if w != me and w in procs and procs[w].kernel == mine.kernel
            and tuple(procs[w].pidns) == tuple(mine.pidns)]


def local_peers(procs: dict[int, Ident], me: int, process_ids: list[int] | tuple[int, ...]) -> list[int]:
    """The processes among ``process_ids`` (not ``me``) that ``me`` can watch with a pidfd. Pure."""
    mine = procs.get(me)
    return same_pid_space(procs, me, process_ids) if mine is not None and mine.pidfd else []


def ulfm_needed(procs: dict[int, Ident], setting: str) -> bool:
    """Whether the ULFM receive is watched too: ``setting`` "1"/"0", or "auto": when some pair of
    processes cannot watch each other with pidfds. Pure, and the same on every process (it is
    computed from the allgathered table)."""
    if setting in ("1", "on", "yes", "true"):
        return True
    if setting in ("0", "off", "no", "false"):
        return False
    places = {(p.kernel, tuple(p.pidns)) for p in procs.values()}
    return len(places) > 1 or not all(p.pidfd for p in procs.values())


class Mode(NamedTuple):
    """Decided once at init, the same on every process (spawned ones receive it)."""

    enabled: bool
    ulfm: bool


def watched_peers(procs: dict[int, Ident], me: int, actives: list[int] | tuple[int, ...], active: bool,
                  tell: bool) -> list[int]:
    """The peers process ``me`` watches with pidfds. An active rank: the active peers on its node
    (a notice interrupts it). A spare, when Open MPI is told of deaths (``tell``): the same, to tell
    its own Open MPI (it takes part in the repair's shrink) and to wake from its nap; but only
    peers of its own PMIx namespace: Open MPI's MPI_Finalize ends with a fence over the namespace,
    so none of them ends normally before this spare has begun to exit and stopped telling, which
    a spawned peer (another namespace) could. Otherwise nobody."""
    if active:
        watched = list(actives)
    elif tell and me in procs and procs[me].nspace:
        ns = procs[me].nspace
        watched = [p for p in actives if p in procs and procs[p].nspace == ns]
    else:
        watched = []
    return local_peers(procs, me, watched)
